"""`python -m strata.synth`: the synth command on its own."""

import sys

from .command import main

sys.exit(main())
