"""``python -m iaccode_agui``."""
import sys

from iaccode_agui.server.cli import main

if __name__ == "__main__":
    sys.exit(main())
