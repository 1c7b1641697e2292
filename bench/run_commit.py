"""The commit a benchmark run measured, for the header of its table.

tools/gpu-session runs a `git archive` of a commit (no .git there) and exports
SEGRED_COMMIT; elsewhere it is the working tree's HEAD, marked when the tree has
uncommitted changes (then the table is not from that commit alone).
"""
import os
import subprocess


def run_commit():
    c = os.environ.get("SEGRED_COMMIT")
    if c:
        return c
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True).stdout.strip()
    except OSError:
        return "unknown"
    return (head or "unknown") + (" + uncommitted changes" if dirty else "")
