"""``python -m llmpar.validation [OPTIONS]``: an alias of ``llmpar validate [OPTIONS]``."""

import sys

from llmpar.cli.main import main

if __name__ == "__main__":
    main(["validate", *sys.argv[1:]])
