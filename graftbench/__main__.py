"""``python -m graftbench``: the command line, for a process started by path (an emulator, a job runner) where the
``graftbench`` script's shebang is not followed."""

import sys

from graftbench.cli.app import app

if __name__ == "__main__":
    sys.exit(app(prog_name="graftbench"))
