"""No torch: rank 1 exits with status 3; rank 0 records its arguments and working directory."""

import json
import os
import sys

if os.environ.get("RANK") == "1":
    sys.exit(3)
with open("args.json", "w") as out:
    json.dump({"argv": sys.argv[1:], "cwd": os.getcwd()}, out)
print("rank 0 wrote args.json")
