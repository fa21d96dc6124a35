"""``python -m clumpscout`` is the ``clumpscout`` command."""

import sys

from clumpscout.cli import main

if __name__ == "__main__":
    sys.exit(main())
