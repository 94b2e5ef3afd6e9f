"""The evaluation stage: evaluate, an eval run and its manifest, deposit and its plan, the flywheel (one round and
over rounds), the exactness check, the replay of committed expectations."""
