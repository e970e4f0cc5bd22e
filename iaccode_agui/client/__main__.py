"""``python -m iaccode_agui.client``."""
import sys

from iaccode_agui.client.command import main

if __name__ == "__main__":
    sys.exit(main())
