"""`python -m difftest`: the command line."""

import sys

from difftest.cli import main

sys.exit(main())
