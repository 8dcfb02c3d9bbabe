import sys

from localcluster.deviceplugin import main

sys.exit(main())
