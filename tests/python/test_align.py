"""segred align against the installed torch on the CPU (issue: check and align).

torch 2.11's segment_reduce max/min backward hands the full negative gradient to
every tied element; the aligner must report exactly that, class and rows, and a
correct implementation must yield no wrong row."""
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from segred import align  # noqa: E402

TIED_INPUTS = ("tie_two", "tie_all", "tie_signed_zero", "tie_inf")


@pytest.fixture(scope="module")
def torch_rows():
    return align.align_cases(align.torch_impl("cpu"))


def _bwd(rows, reduce, meta, grad):
    return [r for r in rows if r.direction == "bwd" and r.detail.get("reduce", None) in (None, reduce)
            and f"/{reduce}/{meta}/" in r.case and r.case.split("/")[0] in TIED_INPUTS
            and f"/g={grad:g}/" in r.case]


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("meta", ["lengths", "offsets"])
@pytest.mark.parametrize("grad", [-2.5, -1.0])
def test_tie_split_defect_reported_for_negative_gradients(torch_rows, reduce, meta, grad):
    rows = [r for r in _bwd(torch_rows, reduce, meta, grad)
            if r.case.startswith(("tie_two", "tie_all")) and "initial" not in r.case]
    assert len(rows) == 4  # two inputs x float64/float32
    for r in rows:
        assert r.verdict == "WRONG" and r.defect == align.TIE_SIGN_DEFECT, r


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("meta", ["lengths", "offsets"])
@pytest.mark.parametrize("grad", [1.0, 2.5, 0.0])
def test_positive_and_zero_gradient_rows_match(torch_rows, reduce, meta, grad):
    rows = _bwd(torch_rows, reduce, meta, grad)
    assert rows
    for r in rows:
        assert r.verdict == "ok", r


def test_forward_rows_of_max_min_match(torch_rows):
    fwd = [r for r in torch_rows if r.direction == "fwd" and ("/max/" in r.case or "/min/" in r.case)]
    assert fwd and all(r.verdict == "ok" for r in fwd)


def test_every_tie_sign_row_is_a_negative_gradient(torch_rows):
    for r in torch_rows:
        if r.defect == align.TIE_SIGN_DEFECT:
            assert r.detail["grad_value"] < 0 or "mixed" in r.case, r


def test_a_correct_implementation_yields_no_wrong_rows():
    rows = align.align_cases(align.segred_impl)
    wrong, classes = align.summarize(rows)
    assert rows and not wrong, classes


def test_segred_align_command_exit_status_and_report(tmp_path):
    report = tmp_path / "align.md"
    p = subprocess.run([sys.executable, "-m", "segred", "align", "--device", "cpu", "-q", "--report", str(report)],
                       capture_output=True, text=True)
    assert p.returncode == 1, p.stderr  # torch diverged
    assert align.TIE_SIGN_DEFECT in p.stdout
    assert align.TIE_SIGN_DEFECT in report.read_text()
    ok = subprocess.run([sys.executable, "-m", "segred.align", "--device", "cpu", "--impl", "segred", "-q"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout[-2000:]
