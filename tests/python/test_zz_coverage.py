"""Fails when a registered CPU path was never reached by the Python suite."""
import pytest

import segred
from conftest import REACHED


def test_every_cpu_path_reached(request):
    if not getattr(request.config, "_segred_full_run", False):
        pytest.skip("coverage is judged on the full suite only")
    cpu = [p.name for p in segred.paths() if p.backend == "cpu"]
    table = "\n".join(f"  {p}: {len(REACHED.get(p, ()))} tests" for p in cpu)
    missing = [p for p in cpu if not REACHED.get(p)]
    assert not missing, f"unreached CPU paths {missing}\n{table}"
