"""The programs stage: the sandbox, the program environment, program mode and program replay."""
