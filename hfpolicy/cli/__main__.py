"""`python -m hfpolicy.cli` runs the `hfpolicy` command."""

import sys

from hfpolicy.cli.commands import main

sys.exit(main())
