"""`python -m emqsim ...`"""

import sys

try:
    from emqsim.cli import main
except KeyboardInterrupt:  # Ctrl-C while still importing: nothing has started
    print("emqsim: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
