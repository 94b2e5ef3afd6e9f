"""The eval stage: exactness checks and replays, deposit reuse, transfer, the flywheel over rounds, certificates."""
