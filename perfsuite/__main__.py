import sys

from perfsuite.cli.main import main

sys.exit(main())
