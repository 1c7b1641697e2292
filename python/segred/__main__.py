"""`python -m segred ...` runs the segred command installed beside this package."""
import os
import shutil
import subprocess
import sys
import sysconfig


def main():
    exe = shutil.which("segred") or os.path.join(sysconfig.get_path("scripts"), "segred")
    sys.exit(subprocess.call([exe, *sys.argv[1:]]))


if __name__ == "__main__":
    main()
