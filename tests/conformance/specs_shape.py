"""Cases for the shape family: permute and its spellings, flatten, squeeze, unsqueeze, flip,
basic slicing (the slice view), narrow, select, split, chunk, unfold, repeat, roll.
References are NumPy's own shape functions and slicing."""
import numpy as np

from tests.conformance.harness import ALL, Case

S3 = [((2, 3, 4),), ((1, 2, 3),), ((0, 2, 3),), ((2, 1, 0),)]


def _unfold_ref(a, dim, size, step):
    a = np.moveaxis(a, dim, -1)
    n = a.shape[-1]
    wins = [a[..., w * step:w * step + size] for w in range((n - size) // step + 1)]
    out = np.stack(wins, axis=-2)                 # [..., nw, size]
    return np.moveaxis(out, -2, dim if dim >= 0 else dim - 1)


def _split_ref(a, size, axis):
    n = a.shape[axis]
    return [np.take(a, range(i, min(i + size, n)), axis=axis) for i in range(0, n, size)]


CASES = [
    # -- permute ---------------------------------------------------------------------------
    Case("permute", "permute", lambda a: a.permute(2, 0, 1),
         lambda a: np.transpose(a, (2, 0, 1)), S3, dtypes=ALL),
    Case("permute_neg_dims", "permute", lambda a: a.permute((-1, -3, -2)),
         lambda a: np.transpose(a, (2, 0, 1)), S3[:2], dtypes=ALL),
    Case("swap_dims", "permute", lambda a: a.swap_dims(0, -1), lambda a: np.swapaxes(a, 0, -1),
         S3, dtypes=ALL),
    Case("swap_dims_same", "permute", lambda a: a.swap_dims(1, -2) * 2,
         lambda a: a * 2, S3[:2]),
    Case("transpose_default", "permute", lambda a: a.transpose(),
         lambda a: np.swapaxes(a, -1, -2), [((3, 4),), ((2, 1, 3),), ((0, 2),)], dtypes=ALL),
    Case("transpose_1d", "permute", lambda a: a.transpose() + 1, lambda a: a + 1,
         [((5,),), ((),)]),
    Case("movedim", "permute", lambda a: a.movedim(0, -1), lambda a: np.moveaxis(a, 0, -1),
         S3, dtypes=ALL),
    Case("movedim_multi", "permute", lambda a: a.movedim((0, 1), (2, 0)),
         lambda a: np.moveaxis(a, (0, 1), (2, 0)), S3[:3], dtypes=ALL),
    Case("T_property", "permute", lambda a: a.T, lambda a: a.T, S3[:3], dtypes=ALL),
    Case("permute_then_sum", ("permute", "sum"), lambda a: a.permute(1, 2, 0).sum(0),
         lambda a: np.transpose(a, (1, 2, 0)).sum(0), S3[:2]),
    # -- reshapes ------------------------------------------------------------------------
    Case("flatten", "reshape", lambda a: a.flatten(), lambda a: a.reshape(-1),
         [((2, 3, 4),), ((),), ((0, 3),)], dtypes=ALL),
    Case("flatten_range", "reshape", lambda a: a.flatten(1, -1),
         lambda a: a.reshape(a.shape[0], int(np.prod(a.shape[1:]))), S3, dtypes=ALL),
    Case("flatten_mid", "reshape", lambda a: a.flatten(-2, -2),
         lambda a: a, S3[:2], dtypes=ALL),
    Case("squeeze_all", "reshape", lambda a: a.squeeze(), lambda a: np.squeeze(a),
         [((1, 3, 1),), ((1,),), ((),), ((1, 0),)], dtypes=ALL),
    Case("squeeze_dim", "reshape", lambda a: a.squeeze(-1),
         lambda a: np.squeeze(a, -1) if a.shape[-1] == 1 else a,
         [((2, 1),), ((1, 3),), ((0, 1),)], dtypes=ALL),
    Case("squeeze_dims", "reshape", lambda a: a.squeeze((0, 2)),
         lambda a: np.squeeze(a, (0, 2)), [((1, 3, 1),), ((1, 0, 1),)], dtypes=ALL),
    Case("unsqueeze", "reshape", lambda a: a.unsqueeze(1), lambda a: np.expand_dims(a, 1),
         [((2, 3),), ((0,),), ((4,),)], dtypes=ALL),
    Case("unsqueeze_neg", "reshape", lambda a: a.unsqueeze(-1), lambda a: a[..., None],
         [((2, 3),), ((),), ((0, 2),)], dtypes=ALL),
    # -- flips and basic slicing (the slice view) ----------------------------------------
    Case("flip", "slice", lambda a: a.flip((0, -1)), lambda a: np.flip(a, (0, -1)), S3,
         dtypes=ALL),
    Case("flip_one", "slice", lambda a: a.flip(1), lambda a: np.flip(a, 1), S3, dtypes=ALL),
    Case("flip_0d", "slice", lambda a: a.flip(()) + 1, lambda a: a + 1, [((),), ((3,),)]),
    Case("getitem_neg_step", "slice", lambda a: a[::-2], lambda a: a[::-2],
         [((5, 3),), ((4,),), ((1, 2),), ((0, 2),)], dtypes=ALL),
    Case("getitem_slices", "slice", lambda a: a[1:, ::-1, -3:-1],
         lambda a: a[1:, ::-1, -3:-1], S3, dtypes=ALL),
    Case("getitem_steps", "slice", lambda a: a[-1:0:-2, 1::2],
         lambda a: a[-1:0:-2, 1::2], [((6, 5),), ((3, 2),), ((0, 4),)], dtypes=ALL),
    Case("getitem_out_of_range_slice", "slice", lambda a: a[10:20, -10:2],
         lambda a: a[10:20, -10:2], [((3, 4),), ((1, 5),)], dtypes=ALL),
    Case("getitem_int", ("slice", "reshape"), lambda a: a[1, ..., -1],
         lambda a: a[1, ..., -1], [((2, 3, 4),), ((2, 1),), ((3, 0, 2),)], dtypes=ALL),
    Case("getitem_none_ellipsis", ("slice", "reshape"), lambda a: a[None, ..., None, ::-1],
         lambda a: a[None, ..., None, ::-1], S3, dtypes=ALL),
    Case("getitem_0d", "reshape", lambda a: a[None, ...], lambda a: a[None, ...],
         [((),)], dtypes=ALL),
    Case("getitem_empty_key", "slice", lambda a: a[()] * 3, lambda a: a[()] * 3,
         [((),), ((2, 3),)]),
    Case("narrow", "slice", lambda a: a.narrow(-1, 1, 2), lambda a: a[..., 1:3],
         [((3, 4),), ((2, 3, 3),), ((0, 3),)], dtypes=ALL),
    Case("narrow_neg_start", "slice", lambda a: a.narrow(0, -2, 2), lambda a: a[-2:],
         [((3, 4),), ((2,),)], dtypes=ALL),
    Case("select", ("slice", "reshape"), lambda a: a.select(1, -1), lambda a: a[:, -1],
         [((3, 4),), ((2, 3, 2),), ((0, 2),)], dtypes=ALL),
    Case("split_size", "slice", lambda a: a.split(2, dim=1),
         lambda a: _split_ref(a, 2, 1), [((2, 5),), ((3, 4, 2),), ((1, 1),)], dtypes=ALL),
    Case("split_sections", "slice", lambda a: a.split([1, 0, 3], dim=-1),
         lambda a: [a[..., :1], a[..., 1:1], a[..., 1:]], [((2, 4),), ((4,),)], dtypes=ALL),
    Case("chunk", "slice", lambda a: a.chunk(3, 0), lambda a: _split_ref(a, -(-a.shape[0] // 3), 0),
         [((7, 2),), ((3,),), ((2, 3),)], dtypes=ALL),
    # -- unfold / repeat / roll -----------------------------------------------------------
    Case("unfold", "unfold", lambda a: a.unfold(-1, 3, 2), lambda a: _unfold_ref(a, -1, 3, 2),
         [((2, 7),), ((5,),), ((3, 3),), ((0, 4),)], dtypes=ALL),
    Case("unfold_dim0_overlap", "unfold", lambda a: a.unfold(0, 2, 1),
         lambda a: _unfold_ref(a, 0, 2, 1), [((4, 3),), ((2, 2, 2),), ((3, 0),)], dtypes=ALL),
    Case("unfold_gaps", "unfold", lambda a: a.unfold(1, 2, 3), lambda a: _unfold_ref(a, 1, 2, 3),
         [((2, 8),), ((1, 2),)], dtypes=ALL),
    Case("unfold_0d", "unfold", lambda a: a.unfold(0, 1, 1), lambda a: a.reshape(1),
         [((),)], dtypes=ALL),
    Case("repeat", ("reshape", "expand"), lambda a: a.repeat(2, 1, 3),
         lambda a: np.tile(a, (2, 1, 3)), [((2, 3),), ((3,),), ((),), ((0, 2),)], dtypes=ALL),
    Case("repeat_zero", ("reshape", "expand"), lambda a: a.repeat(0, 2),
         lambda a: np.tile(a, (0, 2)), [((2, 3),)], dtypes=ALL, grad=False),
    Case("roll", ("slice", "cat"), lambda a: a.roll((1, -4), (0, -1)),
         lambda a: np.roll(a, (1, -4), (0, -1)), [((3, 5),), ((1, 3),), ((0, 2),)],
         dtypes=ALL),
    Case("roll_flat", ("slice", "cat"), lambda a: a.roll(5), lambda a: np.roll(a, 5),
         [((2, 3),), ((),), ((4,),)], dtypes=ALL),
]
