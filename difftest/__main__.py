"""`python -m difftest`: the command line."""

import sys

from difftest.cli.main import main

sys.exit(main())
