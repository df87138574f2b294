"""`python -m emqsim.cli` (the same as `python -m emqsim`)."""

import sys

from emqsim.cli.app import main

sys.exit(main())
