"""`python -m hfpolicy` runs the `hfpolicy` command (as `python -m hfpolicy.cli` does)."""

import sys

from hfpolicy.cli.commands import main

sys.exit(main())
