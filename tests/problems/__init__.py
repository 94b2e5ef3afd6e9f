"""The problems stage: problem files, shards, the method-transfer set."""
