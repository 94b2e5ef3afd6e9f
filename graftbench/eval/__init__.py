"""The evaluation stage: evaluate, deposit, the workflows, the flywheel, the exactness check, program replay, the
driver's bookkeeping over workers."""
