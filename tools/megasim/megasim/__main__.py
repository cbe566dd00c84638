from .launch import main
import sys

sys.exit(main(sys.argv[1:]))
