import sys

from admission.server import main

sys.exit(main())
