"""Arrays of every framework through the generic functions, and segred.jax under
jit and grad. CUDA arrays (torch, CuPy, JAX) run in the GPU suite on the H200."""
import numpy as np
import pytest

import segred


def test_numpy_in_place_and_numpy_out():
    x = np.random.default_rng(0).uniform(-1, 1, size=(7, 3))
    assert segred._C.data_ptr(x) == x.__array_interface__["data"][0]  # read in place, no copy
    xt = x.T  # strided view, also read in place
    assert segred._C.data_ptr(xt) == xt.__array_interface__["data"][0]
    y = segred.segment_reduce(x, "sum", lengths=np.array([3, 4]))
    assert isinstance(y, np.ndarray) and y.dtype == x.dtype and y.flags.c_contiguous
    p = segred.softmax(x.astype(np.float32), 1)
    assert isinstance(p, np.ndarray) and p.dtype == np.float32


def test_unsupported_array_type_is_a_type_error():
    with pytest.raises(TypeError, match="data"):
        segred.segment_reduce([1.0, 2.0], "sum", lengths=np.array([2]))
    with pytest.raises(TypeError, match="x"):
        segred.softmax("abc", 0)


jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
sj = pytest.importorskip("segred.jax")
jax.config.update("jax_enable_x64", True)


def test_jax_arrays_through_generic_functions_stay_jax():
    x = jnp.arange(12.0).reshape(6, 2)
    y = segred.segment_reduce(x, "max", lengths=jnp.array([2, 4]))
    assert isinstance(y, jax.Array) and y.dtype == x.dtype
    np.testing.assert_array_equal(np.asarray(y), [[2.0, 3.0], [10.0, 11.0]])
    assert segred._C.data_ptr(x) == x.unsafe_buffer_pointer()  # read in place
    p = segred.softmax(x, 1)
    assert isinstance(p, jax.Array)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
def test_jax_jit_grad_matches_reference(reduce):
    from reference import backward as ref_bwd
    from reference import forward as ref_fwd

    rng = np.random.default_rng(1)
    x = rng.permutation(10).astype(np.float64) / 10 + 0.1
    lengths = np.array([3, 0, 5, 2])
    w = np.array([-2.5, 1.0, 0.0, 2.5])

    def loss(t):
        return (sj.segment_reduce(t, reduce, lengths=jnp.asarray(lengths)) * w).sum()

    y = jax.jit(lambda t: sj.segment_reduce(t, reduce, lengths=jnp.asarray(lengths)))(x)
    want = ref_fwd(x, reduce, lengths=lengths)
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-12)
    g = jax.jit(jax.grad(loss))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(g), ref_bwd(w, want, x, reduce, lengths=lengths), rtol=1e-12, atol=1e-15)


def test_jax_tie_split_for_negative_gradient():
    x = jnp.array([1.0, 3.0, 3.0, 2.0])
    g = jax.grad(lambda t: -2.0 * sj.segment_reduce(t, "max", offsets=jnp.array([0, 4])).sum())(x)
    np.testing.assert_array_equal(np.asarray(g), [0.0, -1.0, -1.0, 0.0])
    g1 = jax.grad(lambda t: -2.0 * sj.segment_reduce(t, "max", offsets=jnp.array([0, 4]), tie="last").sum())(x)
    np.testing.assert_array_equal(np.asarray(g1), [0.0, 0.0, -2.0, 0.0])


def test_jax_softmax_jit_grad_matches_jax_nn():
    x = jnp.asarray(np.random.default_rng(2).normal(size=(3, 4)))
    c = jnp.asarray(np.random.default_rng(3).normal(size=(3, 4)))
    for ours, theirs in ((sj.softmax, jax.nn.softmax), (sj.log_softmax, jax.nn.log_softmax)):
        for axis in (0, 1):
            np.testing.assert_allclose(np.asarray(jax.jit(lambda t: ours(t, axis))(x)), np.asarray(theirs(x, axis)),
                                       rtol=1e-12)
            ga = jax.jit(jax.grad(lambda t: (ours(t, axis) * c).sum()))(x)
            gb = jax.grad(lambda t: (theirs(t, axis) * c).sum())(x)
            np.testing.assert_allclose(np.asarray(ga), np.asarray(gb), rtol=1e-10, atol=1e-12)


def test_jax_bad_metadata_raises_with_segred_message():
    with pytest.raises(Exception, match="lengths.*must sum"):
        jax.block_until_ready(sj.segment_reduce(jnp.ones(6), "sum", lengths=jnp.array([1, 2])))
    with pytest.raises(ValueError, match="axis"):
        sj.segment_reduce(jnp.ones(6), "sum", lengths=jnp.array([6]), axis=3)
