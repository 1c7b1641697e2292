"""segred align against the installed torch on the CPU (issue: check and align).

torch 2.11's segment_reduce max/min backward hands the full negative gradient to
every tied element; the aligner must report exactly that, class and rows, and a
correct implementation must yield no wrong row. torch's CPU softmax family
matches on every softmax row; injected wrong softmax implementations are reported
with their defect class, a wrapping spatial backward as a 32-bit offset defect;
the --large boundary cases are checked as data (and on their small analogues)."""
import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from segred import _C, align  # noqa: E402

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
    text = report.read_text()
    assert align.TIE_SIGN_DEFECT in text
    # the softmax rows, with segred's answer beside torch's
    assert "| random_lastdim/softmax/float64 | fwd | matches |  | ok | ok |" in text
    assert "| special_rows_spatial/log_softmax/bfloat16 | bwd | matches |  | ok | ok |" in text
    assert "softmax" not in "".join(line for line in p.stdout.splitlines() if "WRONG" in line)
    ok = subprocess.run([sys.executable, "-m", "segred.align", "--device", "cpu", "--impl", "segred", "-q"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout[-2000:]


# ---- softmax ----------------------------------------------------------------
#
# torch's CPU softmax family matches the float64 reference on every softmax row
# (last dim and non-last dim, every special value, float64/32/16 and bfloat16);
# wrong implementations injected below are reported with the right defect class.

SPATIAL_WRAP = "spatial softmax backward: 32-bit offsets wrap past UINT32_MAX elements"


@pytest.fixture(scope="module")
def softmax_rows():
    return align.align_softmax(align.TorchSoftmax(), "cpu", beside=align.SegredSoftmax())


def test_softmax_rows_all_match_on_cpu_torch(softmax_rows):
    cases = _C.softmax_cases()
    assert len(softmax_rows) == 2 * len(cases)
    assert {r.direction for r in softmax_rows} == {"fwd", "bwd"}
    assert {r.detail["op"] for r in softmax_rows} == {"softmax", "log_softmax"}
    assert {r.detail["layout"] for r in softmax_rows} == {"last-dim", "spatial"}
    assert {r.detail["dtype"] for r in softmax_rows} == {"float64", "float32", "float16", "bfloat16"}
    for r in softmax_rows:
        assert r.verdict == "ok" and r.observed == "matches" and not r.defect, r
        assert r.segred == "ok", r  # segred beside torch on the CPU


@pytest.mark.parametrize("name", [
    "row_all_neg_inf_spatial/softmax/float32", "row_nan_lastdim/log_softmax/float16",
    "special_rows_spatial/log_softmax/bfloat16", "transposed_spatial/softmax/float64",
    "long_columns_tiles_l2_512k/log_softmax/float32", "dim_size_1_spatial/softmax/float16", "zero_dim/log_softmax/float64",
    "empty_tensor/softmax/float32"])
def test_named_softmax_rows_match_forward_and_backward(softmax_rows, name):
    rows = [r for r in softmax_rows if r.case == name]
    assert [r.direction for r in rows] == ["fwd", "bwd"]
    assert all(r.verdict == "ok" for r in rows), rows


class _LogBackwardWithoutExp(align.TorchSoftmax):
    """Wrong on purpose: log_softmax backward g - y * sum(g) (exp forgotten)."""

    def backward(self, grad, output, dim, log):
        if not log:
            return super().backward(grad, output, dim, log)
        return grad - output * grad.sum(dim, keepdim=True)


def test_a_wrong_log_softmax_backward_is_reported_by_layout_and_input():
    rows = align.align_softmax(_LogBackwardWithoutExp(), "cpu")
    wrong, classes = align.summarize(rows)
    assert wrong
    for r in wrong:
        assert r.direction == "bwd" and r.detail["op"] == "log_softmax", r
        assert r.defect == f"{r.detail['layout']} log_softmax backward: differs on input '{r.detail['input']}'", r
    assert {r.detail["layout"] for r in wrong} == {"last-dim", "spatial"}
    assert all(r.verdict == "ok" for r in rows if r.detail["op"] == "softmax" or r.direction == "fwd")


def test_a_correct_softmax_implementation_yields_no_wrong_rows():
    rows = align.align_softmax(align.SegredSoftmax(), "cpu")
    assert rows and not align.summarize(rows)[0]


# ---- softmax boundary cases (--large) -----------------------------------------


def test_large_case_list_is_well_formed():
    cases = align.large_cases()
    assert len(cases) == 20  # 5 shapes x softmax/log_softmax x fwd/bwd
    first = cases[0]
    assert first["shape"] == (1, 2, 2**31 + 1) and first["dim"] == 1 and first["kernel"] == "spatial"
    kernels = ("spatial", "spatial_staged", "lastdim_block", "lastdim_warp")
    assert {c["kernel"] for c in cases} == set(kernels)
    assert {c["cuda_path"] for c in cases} == {
        f"{op}.{d}.cuda.{k}.i64" for op in ("softmax", "log_softmax") for d in ("fwd", "bwd") for k in kernels}
    staged = [c for c in cases if c["kernel"] == "spatial_staged"]
    assert all(c["shape"] == (1, 325, 13215284) and c["numel"] == 2**32 + 4 for c in staged)
    for c in cases:
        n = c["numel"]
        assert n == int(np.prod(c["shape"])) and n > 2**31
        assert c["boundary"] == ("UINT32_MAX" if n > 2**32 else "INT32_MAX")
        assert c["dtype"] == "float16"
        assert c["arrays"] == (2 if c["direction"] == "fwd" else 3)
        assert c["bytes_needed"] == n * 2 * c["arrays"] <= 24 * 2**30 + 64
        assert len(c["checks"]) == len(c["expected"]) >= 7
        assert c["checks"] == sorted(set(c["checks"])) and c["checks"][0] == 0 and c["checks"][-1] == n - 1
        assert 2**31 in c["checks"] and 2**31 - 1 in c["checks"]
        assert all(0 <= at < n for at, _ in c["a_patches"] + c["b_patches"])
        assert all(at in c["checks"] for at, _ in c["a_patches"] + c["b_patches"])
    # The torch reproducer: softmax backward on [1, 2, 2^31+1] over dim 1; column 1 must be 0
    # (torch 2.11 on CUDA: -0.52734375), the last column -1.125.
    bwd = next(c for c in cases if c["kernel"] == "spatial" and c["op"] == "softmax" and c["direction"] == "bwd")
    exp = dict(zip(bwd["checks"], bwd["expected"]))
    assert exp[1] == 0.0 and exp[0] == 1.25 and exp[2**32 + 1] == -1.125 and exp[2**32] == 0.0


def test_large_cases_state_their_memory_need_and_skip_without_it(monkeypatch):
    monkeypatch.setattr(align, "_free_bytes", lambda device: 3 * 2**30)
    cases = align.large_cases()
    rows = align.align_large(align.TorchSoftmax(), "cpu", cases)  # nothing is allocated
    assert [r.verdict for r in rows] == ["skipped"] * len(cases)
    assert rows[2].observed == "skipped: needs 24.0 GiB, 3.0 GiB free on cpu", rows[2]
    assert all(r.detail["bytes_needed"] == c["bytes_needed"] for r, c in zip(rows, cases))


def test_small_analogues_of_the_large_cases_match_on_cpu_torch_and_segred():
    rows = align.align_large(align.TorchSoftmax(), "cpu", align.large_cases(small=True), beside=align.SegredSoftmax())
    assert len(rows) == 20
    for r in rows:
        assert r.verdict == "ok" and r.segred == "ok", r


class _WrapsSpatialBackward(align.TorchSoftmax):
    """Wrong on purpose, like a spatial backward whose offsets wrap: the last
    column's results land on column 1."""

    def backward(self, grad, output, dim, log):
        gi = super().backward(grad, output, dim, log)
        if gi.dim() == 3 and gi.shape[-1] > 1:
            L = gi.shape[-1]
            gi[0, :, 1] = gi[0, :, L - 1]
        return gi


def test_a_wrapping_spatial_backward_is_classed_as_a_32bit_offset_defect():
    rows = align.align_large(_WrapsSpatialBackward(), "cpu", align.large_cases(small=True))
    wrong, classes = align.summarize(rows)
    assert set(classes) == {SPATIAL_WRAP}
    assert {r.case.split("/")[3] for r in wrong} == {"softmax.bwd", "log_softmax.bwd"}
    assert all(r.detail["layout"] == "spatial" and r.direction == "bwd" for r in wrong)
    # ... but not when the small rows of that layout and direction are wrong too.
    rows = align.align_large(_WrapsSpatialBackward(), "cpu", align.large_cases(small=True),
                             small_ok=lambda layout, d: False)
    assert {r.defect for r in rows if r.verdict == "WRONG"} == {"spatial softmax backward: wrong on small inputs too"}
