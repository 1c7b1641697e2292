"""Path coverage across the Python suite: every test runs inside segred.trace(),
and tests/python/test_zz_coverage.py (collected last) asserts that every
registered CPU path was reached, listing path -> tests."""
import collections

import pytest

import segred

REACHED = collections.defaultdict(set)


@pytest.fixture(autouse=True)
def _record_paths(request):
    with segred.trace() as t:
        yield
    for r in t.records:
        REACHED[r.path].add(request.node.nodeid)


def pytest_collection_modifyitems(session, config, items):
    # The coverage verdict is meaningful only for the whole suite, run last.
    cov = [i for i in items if "test_zz_coverage" in i.nodeid]
    rest = [i for i in items if "test_zz_coverage" not in i.nodeid]
    items[:] = rest + cov
    config._segred_full_run = not config.option.keyword and not config.option.markexpr and len(rest) > 0
