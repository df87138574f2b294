"""`python -m emqsim ...`"""

import sys

from emqsim.cli import main

sys.exit(main())
