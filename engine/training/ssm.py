"""Recurrent prefix memories in plain torch: Mamba-2 (SSD, scalar decay per head) and Gated
DeltaNet, each as a step-wise recurrence and as a chunked scan that agree numerically.

Both keep a state S of shape (..., H, Dk, Dv) per head and share one update form

    S_t = a_t * S_{t-1} + k_t u_t^T,        a_t = exp(g_t) in (0, 1]

    Mamba-2:  u_t = dt_t * v_t                                  (k_t = B_t, v_t = x_t)
    GDN:      u_t = beta_t * (v_t - a_t * S_{t-1}^T k_t)         (delta rule, |k_t| = 1)

so inside a chunk that starts from S_0, with G_i = g_1 + ... + g_i,

    S_i = exp(G_i) S_0 + sum_{j<=i} exp(G_i - G_j) k_j u_j^T.

Mamba-2's u is known up front; GDN's solves (I + A) U = beta * (V - exp(G) * K S_0) with
A_ij = beta_i exp(G_i - G_j) k_i.k_j (j < i), i.e. U = T beta V - T beta exp(G) K S_0 with
T = (I + A)^-1, computed for all chunks at once; only the S_0 term runs chunk after chunk.
The state is only ever fed committed target features (the caller's job), and the explicit
state in/out is what the exported observe() graph carries between calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def unit_lower_inverse(a: Tensor, method: str = "solve") -> Tensor:
    """(I + A)^-1 for strictly lower-triangular A (..., n, n).

    "solve": a triangular solve (training). "doubling": the finite Neumann series as a product
    (I - A)(I + A^2)(I + A^4)..., exact because A is nilpotent; plain matmuls, so it exports
    to ONNX for any n up to 2^(squarings+1) without a loop."""
    n = a.shape[-1]
    eye = torch.eye(n, dtype=a.dtype, device=a.device)
    if method == "solve":
        return torch.linalg.solve_triangular(
            eye + a, eye.expand_as(a), upper=False, unitriangular=True
        )
    if not method.startswith("doubling"):
        raise ValueError(f"unknown inverse method {method!r}")
    # "doubling:<max n>" fixes the number of squarings when n is symbolic (export)
    n_max = int(method.split(":")[1]) if ":" in method else n
    squarings = max(0, math.ceil(math.log2(max(n_max, 1))) - 1)
    t = eye - a
    power = a
    for _ in range(squarings):
        power = power @ power
        t = t + t @ power
    return t


def _l2norm(x: Tensor, eps: float = 1e-6) -> Tensor:
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


@dataclass
class Transition:
    """Per-token quantities of the update, heads before time: k (..., H, T, Dk),
    v (..., H, T, Dv), g = log a (..., H, T) <= 0, beta (..., H, T) (GDN) or None."""

    k: Tensor
    v: Tensor
    g: Tensor
    beta: Tensor | None


@dataclass
class ChunkScan:
    """A chunked scan of (N, T) inputs: enough to rebuild the state after any prefix."""

    start: Tensor  # (N, nc, H, Dk, Dv): state entering each chunk
    k: Tensor  # (N, nc, H, C, Dk)
    u: Tensor  # (N, nc, H, C, Dv)
    cum_g: Tensor  # (N, nc, H, C): inclusive cumulative log decay inside the chunk
    final: Tensor  # (N, H, Dk, Dv): state after all T inputs
    initial: Tensor  # (N, H, Dk, Dv)

    def states_at(self, positions: Tensor) -> Tensor:
        """States after consuming inputs[:p] for p in positions (N, A), 0 <= p <= T."""
        n, nc, h, c, dk = self.k.shape
        idx = (positions - 1).clamp(min=0)
        chunk, r = idx // c, idx % c  # (N, A)
        a = positions.shape[1]
        bidx = torch.arange(n, device=positions.device)[:, None].expand(n, a)
        k = self.k[bidx, chunk]  # (N, A, H, C, Dk)
        u = self.u[bidx, chunk]  # (N, A, H, C, Dv)
        cg = self.cum_g[bidx, chunk]  # (N, A, H, C)
        start = self.start[bidx, chunk]  # (N, A, H, Dk, Dv)
        g_r = cg.gather(-1, r[:, :, None, None].expand(n, a, h, 1))  # (N, A, H, 1)
        j = torch.arange(c, device=positions.device)
        keep = (j[None, None, :] <= r[:, :, None])[:, :, None, :]  # (N, A, 1, C)
        w = torch.exp(torch.where(keep, g_r - cg, torch.full_like(cg, -torch.inf)))
        s = torch.exp(g_r)[..., None] * start + torch.einsum("nahc,nahck,nahcv->nahkv", w, k, u)
        init = self.initial[:, None].expand_as(s)
        return torch.where((positions == 0)[:, :, None, None, None], init, s)


class RecurrentMemory(nn.Module):
    """Shared machinery; subclasses define `transition` (projections) and `_u_step`."""

    kind = "base"

    def __init__(self, d_in: int, heads: int, key_dim: int, value_dim: int) -> None:
        super().__init__()
        self.d_in, self.heads, self.key_dim, self.value_dim = d_in, heads, key_dim, value_dim
        self.inverse_method = "solve"  # the exporter switches this to "doubling:<n>"

    def zero_state(self, *batch: int, device=None, dtype=torch.float32) -> Tensor:
        return torch.zeros(
            *batch, self.heads, self.key_dim, self.value_dim, device=device, dtype=dtype
        )

    def transition(self, x: Tensor, valid: Tensor | None = None) -> Transition:
        raise NotImplementedError

    # --- (a) step-wise recurrence -------------------------------------------------------
    def step(self, x: Tensor, state: Tensor, valid: Tensor | None = None) -> Tensor:
        """One input x (..., d_in) -> next state; invalid inputs leave the state as it is."""
        tr = self.transition(x[..., None, :], None if valid is None else valid[..., None])
        k, v, g = tr.k[..., 0, :], tr.v[..., 0, :], tr.g[..., 0]  # (..., H, D)
        a = torch.exp(g)[..., None, None]
        if tr.beta is None:
            u = v
        else:
            beta = tr.beta[..., 0, None]
            u = beta * (v - torch.exp(g)[..., None] * torch.einsum("...hk,...hkv->...hv", k, state))
        return a * state + k[..., :, None] * u[..., None, :]

    # --- (b) chunked scan ---------------------------------------------------------------
    def scan(
        self, x: Tensor, state: Tensor | None = None, valid: Tensor | None = None, chunk: int = 64
    ) -> ChunkScan:
        """x (N, T, d_in) -> ChunkScan; valid (N, T) masks padding (no update)."""
        n, t, _ = x.shape
        if state is None:
            state = self.zero_state(n, device=x.device, dtype=x.dtype)
        if valid is None:
            valid = torch.ones(n, t, dtype=x.dtype, device=x.device)
        c = max(1, min(chunk, t))
        pad = (-t) % c
        if pad:
            x = F.pad(x, (0, 0, 0, pad))
            valid = F.pad(valid, (0, pad))
        nc = (t + pad) // c
        tr = self.transition(x, valid)  # (N, H, T', D)
        h = self.heads

        def chunks(z: Tensor) -> Tensor:  # (N, H, T', ...) -> (N, nc, H, C, ...)
            z = z.reshape(n, h, nc, c, *z.shape[3:])
            return z.transpose(1, 2)

        k, v, g = chunks(tr.k), chunks(tr.v), chunks(tr.g)
        cg = torch.cumsum(g, dim=-1)
        u_fixed, w_state = self._chunk_u(k, v, cg, None if tr.beta is None else chunks(tr.beta))
        starts = []
        us = []
        s = state
        decay_to_end = torch.exp(cg[..., -1:] - cg)  # (N, nc, H, C)
        for i in range(nc):
            starts.append(s)
            u = u_fixed[:, i] if w_state is None else u_fixed[:, i] - w_state[:, i] @ s
            us.append(u)
            s = torch.exp(cg[:, i, :, -1])[..., None, None] * s + torch.einsum(
                "nhc,nhck,nhcv->nhkv", decay_to_end[:, i], k[:, i], u
            )
        return ChunkScan(
            start=torch.stack(starts, 1),
            k=k,
            u=torch.stack(us, 1),
            cum_g=cg,
            final=s,
            initial=state,
        )

    def chunk_update(self, x: Tensor, state: Tensor, valid: Tensor) -> Tensor:
        """One chunk of any length, no Python loop over time: the exported observe() path.
        x (N, n, d_in), state (N, H, Dk, Dv), valid (N, n) -> final state."""
        tr = self.transition(x, valid)
        cg = torch.cumsum(tr.g, dim=-1)  # (N, H, n)
        u, w_state = self._chunk_u(tr.k, tr.v, cg, tr.beta)
        if w_state is not None:
            u = u - w_state @ state
        decay_to_end = torch.exp(cg[..., -1:] - cg)
        return torch.exp(cg[..., -1])[..., None, None] * state + torch.einsum(
            "nhc,nhck,nhcv->nhkv", decay_to_end, tr.k, u
        )

    def _chunk_u(
        self, k: Tensor, v: Tensor, cg: Tensor, beta: Tensor | None
    ) -> tuple[Tensor, Tensor | None]:
        """u = u_fixed - w_state @ S_0 inside each chunk (w_state None: u independent of S_0)."""
        if beta is None:
            return v, None
        c = k.shape[-2]
        idx = torch.arange(c, device=k.device)
        lower = idx[:, None] > idx[None, :]
        diff = torch.where(
            lower,
            cg[..., :, None] - cg[..., None, :],
            torch.full_like(cg[..., :, None] - cg[..., None, :], -torch.inf),
        )
        a = beta[..., :, None] * torch.exp(diff) * (k @ k.transpose(-1, -2))
        t = unit_lower_inverse(a, self.inverse_method)
        u_fixed = t @ (beta[..., None] * v)
        w_state = t @ ((beta * torch.exp(cg))[..., None] * k)
        return u_fixed, w_state

    # --- reading ------------------------------------------------------------------------
    def read(self, q: Tensor, state: Tensor) -> Tensor:
        """Query the state: q (..., H, Dk), state (..., H, Dk, Dv) -> (..., H, Dv)."""
        return torch.einsum("...hk,...hkv->...hv", self.normalize_query(q), state)

    def normalize_query(self, q: Tensor) -> Tensor:
        return q


class Mamba2Memory(RecurrentMemory):
    """SSD with a scalar decay per head: a = exp(-exp(A_log) * dt), S += dt * B x^T."""

    kind = "mamba2"

    def __init__(self, d_in: int, heads: int, key_dim: int, value_dim: int) -> None:
        super().__init__(d_in, heads, key_dim, value_dim)
        self.proj = nn.Linear(d_in, heads * (key_dim + value_dim + 1))
        # dt in ~[1e-3, 1e-1] and A in [1, 16] at init (Mamba-2's ranges): long memories
        dt = torch.exp(torch.rand(heads) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1
        self.a_log = nn.Parameter(torch.log(torch.empty(heads).uniform_(1.0, 16.0)))

    def transition(self, x: Tensor, valid: Tensor | None = None) -> Transition:
        h, dk, dv = self.heads, self.key_dim, self.value_dim
        z = self.proj(x)  # (..., T, H*(Dk+Dv+1))
        k, v, dt = z.split([h * dk, h * dv, h], dim=-1)
        dt = F.softplus(dt + self.dt_bias)  # (..., T, H)
        if valid is not None:
            dt = dt * valid[..., None]
        k = k.unflatten(-1, (h, dk)).transpose(-2, -3) / math.sqrt(dk)  # (..., H, T, Dk)
        v = v.unflatten(-1, (h, dv)).transpose(-2, -3)
        dt = dt.transpose(-1, -2)  # (..., H, T)
        g = -torch.exp(self.a_log)[:, None] * dt
        return Transition(k=k, v=dt[..., None] * v, g=g, beta=None)


class GatedDeltaNetMemory(RecurrentMemory):
    """Gated delta rule: S = a (I - beta k k^T) S + beta k v^T, unit-norm keys and queries."""

    kind = "gdn"

    def __init__(self, d_in: int, heads: int, key_dim: int, value_dim: int) -> None:
        super().__init__(d_in, heads, key_dim, value_dim)
        self.proj = nn.Linear(d_in, heads * (key_dim + value_dim + 2))
        dt = torch.exp(torch.rand(heads) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.a_log = nn.Parameter(torch.log(torch.empty(heads).uniform_(1.0, 16.0)))

    def transition(self, x: Tensor, valid: Tensor | None = None) -> Transition:
        h, dk, dv = self.heads, self.key_dim, self.value_dim
        z = self.proj(x)
        k, v, b, a = z.split([h * dk, h * dv, h, h], dim=-1)
        beta = torch.sigmoid(b)
        dt = F.softplus(a + self.dt_bias)
        if valid is not None:
            beta = beta * valid[..., None]
            dt = dt * valid[..., None]
        k = _l2norm(k.unflatten(-1, (h, dk))).transpose(-2, -3)
        v = v.unflatten(-1, (h, dv)).transpose(-2, -3)
        g = -torch.exp(self.a_log)[:, None] * dt.transpose(-1, -2)
        return Transition(k=k, v=v, g=g, beta=beta.transpose(-1, -2))

    def normalize_query(self, q: Tensor) -> Tensor:
        return _l2norm(q)


def make_memory(
    kind: str, d_in: int, heads: int, key_dim: int, value_dim: int
) -> RecurrentMemory | None:
    if kind == "none":
        return None
    cls = {"mamba2": Mamba2Memory, "gdn": GatedDeltaNetMemory}[kind]
    return cls(d_in, heads, key_dim, value_dim)
