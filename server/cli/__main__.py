"""`python -m server.cli ...` is `tandem ...`."""

import sys

from server.cli.main import main

sys.exit(main())
