"""The engine batch's KV cache: left-padded tensors, joined and trimmed by row.

A batch is a transformers ``DynamicCache`` (``[B, H, T, d]`` keys and values per layer) and a
``[B, T]`` long attention mask, 0 where a row is left padding.  These functions build,
merge and cut such batches; they hold no state.  torch and transformers are imported when
first used, as the sidecar's optional extra.
"""

from __future__ import annotations


def new_cache(kv=None):
    """A ``DynamicCache`` holding ``kv`` [(keys, values) per layer], or an empty one."""
    from transformers import DynamicCache
    c = DynamicCache()
    for i, (k, v) in enumerate(kv or ()):
        c.update(k, v, i)
    return c


def kv_of(cache) -> list:
    """[(keys, values) per layer] of a ``DynamicCache`` (either transformers layout)."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def left_padded(rows: list, device):
    """``rows`` (token-id sequences) -> (ids [n, T], mask [n, T], positions [n, T]) on
    ``device``, each row right-aligned behind left padding."""
    import torch
    n, T = len(rows), max(len(ids) for ids in rows)
    ids = torch.zeros(n, T, dtype=torch.long)
    mask = torch.zeros(n, T, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, T - len(row):] = torch.tensor(row, dtype=torch.long)
        mask[i, T - len(row):] = 1
    ids, mask = ids.to(device), mask.to(device)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return ids, mask, pos


def select_rows(cache, mask, rows):
    """Rows ``rows`` (a long tensor of row indices) of a batch: (kv list, mask), untrimmed."""
    kv = [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in kv_of(cache)]
    return kv, mask.index_select(0, rows)


def concat(cache, mask, kv, kv_mask):
    """Batch (``cache``, ``mask`` [B, T]) followed by (``kv``, ``kv_mask`` [B', T']), both
    left-padded to the longer T: (cache, mask [B + B', max(T, T')])."""
    import torch
    old = kv_of(cache)
    T = max(mask.shape[1], kv_mask.shape[1])
    pad = lambda t: torch.nn.functional.pad(t, (0, 0, T - t.shape[2], 0))  # noqa: E731
    padm = lambda m: torch.nn.functional.pad(m, (T - m.shape[1], 0))  # noqa: E731
    joined = new_cache(
        [(torch.cat([pad(k0), pad(k1)]), torch.cat([pad(v0), pad(v1)]))
         for (k0, v0), (k1, v1) in zip(old, kv)])
    return joined, torch.cat([padm(mask), padm(kv_mask)])


def keep_rows(cache, mask, keep: list, device):
    """Rows ``keep`` (indices) of a batch, with the columns that became all padding
    trimmed: (cache, mask)."""
    import torch
    idx = torch.tensor(keep, device=device)
    mask = mask.index_select(0, idx)
    first = int((mask.sum(0) > 0).nonzero()[0])      # drop all-padding columns
    cache = new_cache(
        [(k.index_select(0, idx)[:, :, first:], v.index_select(0, idx)[:, :, first:])
         for k, v in kv_of(cache)])
    return cache, mask[:, first:]
