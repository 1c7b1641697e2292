"""Train a tiny model whose pooling is segment_reduce "max" over groups with tied
maxima, in PyTorch, once with segred.torch and once with torch.segment_reduce.

Each group's score is a max over ReLU features, so ties are common (every
feature clipped to 0 ties). With the loss's gradient negative on some groups,
torch.segment_reduce hands each of the k tied elements the whole gradient, so a
group's gradients sum to k*g; segred splits it (the amax rule) and sums to g.

    python examples/train_segment_max_pool.py
"""
import torch

import segred.torch as st


def amax_reference_grad(h, lengths, w):
    """The amax/amin rule, group by group: the gradient of sum(w_s * amax(group_s))."""
    h = h.detach().clone().requires_grad_()
    sum(w[i] * g.amax(dim=0) for i, g in enumerate(torch.split(h, lengths.tolist()))).sum().backward()
    return h.grad


def main():
    torch.manual_seed(0)
    groups, feat = 64, 8
    lengths = torch.randint(1, 6, (groups,))
    n = int(lengths.sum())
    x = torch.randn(n, 4)
    target = torch.randn(groups, feat)
    lin = torch.nn.Linear(4, feat)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    for step in range(30):
        h = torch.relu(lin(x))  # many exact zeros: tied maxima
        h.retain_grad()
        pooled = st.segment_reduce(h, "max", lengths=lengths)
        loss = ((pooled - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step:2d}  loss {loss.item():.4f}")

    # Gradient check on the trained model, with signed upstream weights.
    h = torch.relu(lin(x)).detach()
    w = torch.randn(groups, feat)
    ref = amax_reference_grad(h, lengths, w)
    ours_h = h.clone().requires_grad_()
    (st.segment_reduce(ours_h, "max", lengths=lengths) * w).sum().backward()
    torch_h = h.clone().requires_grad_()
    (torch.segment_reduce(torch_h, "max", lengths=lengths) * w).sum().backward()
    ours_err = (ours_h.grad - ref).abs().max().item()
    torch_err = (torch_h.grad - ref).abs().max().item()
    print(f"max |grad - amax rule|: segred {ours_err:.3g}, torch.segment_reduce {torch_err:.3g}")
    assert ours_err < 1e-6, "segred must follow the amax rule"
    assert torch_err > 1e-3, "torch.segment_reduce's tie defect should show on this data"
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
