import sys

from perfsuite.cli import main

sys.exit(main())
