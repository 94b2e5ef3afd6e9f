"""The evaluation stage: evaluate, deposit, workflows, the flywheel, the exactness check."""
