"""The outliers test: a record far from the rest of its species (CoordinateCleaner's cc_outl, "quantile").

A record's mean great-circle distance to the species' other records is compared with the distribution of
those means over all the species' records: above quantile 0.75 + multiplier x IQR (quantiles interpolated
as R's default, numpy's "linear") it is flagged. Records at one site share their mean, so the distances are
taken between sites weighted by their records: the distinct points, or, for a species with more distinct
points than the exact limit, the centres of square cells (CoordinateCleaner thins to 0.5-degree cells
above 10,000 records), which the warehouse groups before anything reaches Python. So the work is at most
the limit squared, and the memory the sites', never the records'. Dagster-free: numpy, in blocks.

Each pair's distance is taken in whole metres, so a site's sum of distances is a whole number, exact in a
double (under 2^53 for any species of fewer than 400 million records), whatever order it is added in. That
lets a refresh start from the sums a load kept (``SiteSums``) and add only what the changed sites change:
the sums come out the same, bit for bit, as from every pair.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from surveillance_pipeline.core.partition_files import replace_file

# The sphere PostGIS measures great-circle distances on (its mean radius, metres).
EARTH_RADIUS_M = 6_371_008.7714
# Rows of the distance matrix computed at once: BLOCK_ROWS x sites doubles, two such arrays (5 MB at
# 10,000 sites): small enough to stay in the cache; 1,000 rows (80 MB each) took 2.1x as long.
BLOCK_ROWS = 32
# Means are rounded to the millimetre before they are compared, so the last bits of a platform's
# trigonometry cannot decide a flag.
MEAN_DECIMALS = 3
# Updating kept sums costs a row of distances per changed site (and one per new site), every pair once
# costs half the square: past this share of the sites changed, the sums are made again from every pair.
UPDATE_SHARE_LIMIT = 0.25
# Bump when what a kept sum means changes (a pair's distance, the sites): a memo of another version is
# not read.
SITE_SUMS_VERSION = 1


def outlier_sites(
    longitude: np.ndarray,
    latitude: np.ndarray,
    records: np.ndarray,
    multiplier: float,
    min_records: int,
    sums: np.ndarray | None = None,
) -> np.ndarray | None:
    """For sites (with their record counts): whether the records at each are outliers; None when the
    species has fewer records with a point than ``min_records`` (the test is not evaluated). ``sums``: the
    sites' distance sums (``distance_sums``), when already at hand."""
    total = int(records.sum())
    if total < max(min_records, 2):
        return None
    if sums is None:
        sums = distance_sums(longitude, latitude, records.astype(np.float64))
    means = np.round(sums / (total - 1), MEAN_DECIMALS)
    low, high = weighted_quantiles(means, records, (0.25, 0.75))
    flagged: np.ndarray = means > high + multiplier * (high - low)
    return flagged


def weighted_quantiles(
    values: np.ndarray, counts: np.ndarray, probabilities: tuple[float, ...]
) -> list[float]:
    """Quantiles of ``values`` each repeated ``counts`` times, interpolated as R's type 7 (numpy's default),
    without repeating them: memory follows the distinct values, not the records."""
    order = np.argsort(values, kind="stable")
    ordered, cumulative = values[order], np.cumsum(counts[order])
    total = int(cumulative[-1])
    result = []
    for probability in probabilities:
        position = (total - 1) * probability
        below = int(np.floor(position))
        above = min(below + 1, total - 1)
        # The value at 0-based rank k is the first whose cumulative count exceeds k.
        at_below = ordered[int(np.searchsorted(cumulative, below, side="right"))]
        at_above = ordered[int(np.searchsorted(cumulative, above, side="right"))]
        result.append(float(at_below + (position - below) * (at_above - at_below)))
    return result


@dataclass(frozen=True)
class _Trigonometry:
    """Per site, what a pair's haversine is made of."""

    sin_half_lat: np.ndarray
    cos_half_lat: np.ndarray
    sin_half_lon: np.ndarray
    cos_half_lon: np.ndarray
    cos_lat: np.ndarray

    @classmethod
    def of(cls, longitude: np.ndarray, latitude: np.ndarray) -> _Trigonometry:
        half_lat = np.radians(latitude) / 2
        half_lon = np.radians(longitude) / 2
        return cls(
            np.sin(half_lat),
            np.cos(half_lat),
            np.sin(half_lon),
            np.cos(half_lon),
            np.cos(np.radians(latitude)),
        )

    def at(self, index: slice | np.ndarray) -> _Trigonometry:
        return _Trigonometry(
            self.sin_half_lat[index],
            self.cos_half_lat[index],
            self.sin_half_lon[index],
            self.cos_half_lon[index],
            self.cos_lat[index],
        )


def _metres(rows: _Trigonometry, columns: _Trigonometry) -> np.ndarray:
    """The great-circle distance in whole metres between each row site and each column site (haversine).

    The half-differences' sines come from each site's own sine and cosine (sin(a - b) = sin a cos b -
    cos a sin b), so a pair costs multiplications, one square root and one arcsine; a pair gives the same
    bits whichever of its sites is the row (a difference negated exactly, then squared). Against sines of
    the differences the distances move by under a nanometre; at 9,792 sites every pair once took 0.5 s,
    every pair with their sines 4.0 s (2026-12-06).
    """
    h = np.multiply(rows.sin_half_lat[:, None], columns.cos_half_lat[None, :])
    h -= rows.cos_half_lat[:, None] * columns.sin_half_lat[None, :]
    h *= h
    across = np.multiply(rows.sin_half_lon[:, None], columns.cos_half_lon[None, :])
    across -= rows.cos_half_lon[:, None] * columns.sin_half_lon[None, :]
    across *= across
    across *= rows.cos_lat[:, None] * columns.cos_lat[None, :]
    h += across
    np.minimum(h, 1.0, out=h)
    np.sqrt(h, out=h)
    np.arcsin(h, out=h)
    h *= 2 * EARTH_RADIUS_M
    np.rint(h, out=h)
    return h


def distance_sums(longitude: np.ndarray, latitude: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per site, the weighted sum of its distances in whole metres to every site (its own adds 0): a whole
    number. Each pair once: a block of rows against itself and every later site, whose column sums are the
    later sites' share."""
    sites = _Trigonometry.of(longitude, latitude)
    count = len(longitude)
    sums = np.zeros(count)
    for start in range(0, count, BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, count)
        metres = _metres(sites.at(slice(start, stop)), sites.at(slice(start, count)))
        sums[start:stop] += metres @ weights[start:count]
        sums[stop:] += weights[start:stop] @ metres[:, stop - start :]
    return sums


def mean_distances(
    longitude: np.ndarray, latitude: np.ndarray, weights: np.ndarray, total: int
) -> np.ndarray:
    """Per site, its records' mean distance (whole metres a pair) to the species' other records."""
    result: np.ndarray = distance_sums(longitude, latitude, weights) / (total - 1)
    return result


@dataclass(frozen=True)
class SiteSums:
    """Sites, their records and their distance sums, as a load made them: what the next load's sums start
    from."""

    longitude: np.ndarray
    latitude: np.ndarray
    records: np.ndarray
    sums: np.ndarray


def updated_distance_sums(
    kept: SiteSums, longitude: np.ndarray, latitude: np.ndarray, records: np.ndarray
) -> np.ndarray | None:
    """The distance sums of the sites given, from ``kept``'s: a site kept adds what each changed site's
    change of records adds at its distance (a site gone: all its records, taken away); a new site's sum is
    made from every site. Equal to ``distance_sums`` bit for bit. None when so many sites changed that
    every pair costs less."""
    old_keys = kept.longitude + 1j * kept.latitude
    new_keys = longitude + 1j * latitude
    _, new_at, old_at = np.intersect1d(new_keys, old_keys, assume_unique=True, return_indices=True)
    weights = records.astype(np.float64)
    change_new = weights.copy()
    change_new[new_at] -= kept.records[old_at]
    gone = np.ones(len(old_keys), dtype=bool)
    gone[old_at] = False
    new = np.ones(len(new_keys), dtype=bool)
    new[new_at] = False
    changed_new = np.flatnonzero(change_new != 0)
    changed = len(changed_new) + int(gone.sum())
    if changed + int(new.sum()) > UPDATE_SHARE_LIMIT * len(new_keys):
        return None
    sites = _Trigonometry.of(longitude, latitude)
    sums = np.zeros(len(new_keys))
    sums[new_at] = kept.sums[old_at]
    columns = _Trigonometry.of(
        np.concatenate([longitude[changed_new], kept.longitude[gone]]),
        np.concatenate([latitude[changed_new], kept.latitude[gone]]),
    )
    change = np.concatenate([change_new[changed_new], -kept.records[gone].astype(np.float64)])
    for start in range(0, len(new_keys), BLOCK_ROWS * 8):
        stop = min(start + BLOCK_ROWS * 8, len(new_keys))
        sums[start:stop] += _metres(sites.at(slice(start, stop)), columns) @ change
    for start in range(0, len(new_keys), BLOCK_ROWS):
        rows = np.flatnonzero(new[start : start + BLOCK_ROWS]) + start
        if len(rows):
            # A new site's kept sum was 0, and its row of changes counted the new sites only.
            sums[rows] = _metres(sites.at(rows), sites) @ weights
    return sums


def read_site_sums(path: Path, *, thinned: bool, cell_degrees: float) -> SiteSums | None:
    """The site sums kept at ``path`` for sites of this kind; None when missing, damaged or of another
    kind (a kept memo saves work: one that cannot be used costs the work again, never a wrong flag)."""
    try:
        data = path.read_bytes()
        line, _, body = data.partition(b"\n")
        header = json.loads(line)
        expected = {"version": SITE_SUMS_VERSION, "thinned": thinned, "cell_degrees": cell_degrees}
        if any(header.get(name) != value for name, value in expected.items()):
            return None
        if hashlib.sha256(body).hexdigest() != header.get("sha256"):
            return None
        table = np.frombuffer(body, dtype="<f8").reshape(int(header["sites"]), 4)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return SiteSums(table[:, 0], table[:, 1], table[:, 2], table[:, 3])


def write_site_sums(path: Path, sums: SiteSums, *, thinned: bool, cell_degrees: float) -> None:
    body = np.column_stack([sums.longitude, sums.latitude, sums.records, sums.sums]).astype("<f8").tobytes()
    header = {
        "version": SITE_SUMS_VERSION,
        "thinned": thinned,
        "cell_degrees": cell_degrees,
        "sites": len(sums.longitude),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    replace_file(path, json.dumps(header, sort_keys=True).encode() + b"\n" + body)


def site_distance_sums(
    longitude: np.ndarray,
    latitude: np.ndarray,
    records: np.ndarray,
    memo: Path,
    *,
    thinned: bool,
    cell_degrees: float,
    trust_memo: bool = True,
) -> np.ndarray:
    """The sites' distance sums, from those kept in ``memo`` where it can be read (and ``trust_memo``),
    else from every pair; the sums are kept in ``memo`` for the next load when the sites changed."""
    kept = read_site_sums(memo, thinned=thinned, cell_degrees=cell_degrees) if trust_memo else None
    sums = None if kept is None else updated_distance_sums(kept, longitude, latitude, records)
    if sums is None:
        sums = distance_sums(longitude, latitude, records.astype(np.float64))
    unchanged = (
        kept is not None
        and np.array_equal(kept.longitude, longitude)
        and np.array_equal(kept.latitude, latitude)
        and np.array_equal(kept.records, records)
        and np.array_equal(kept.sums, sums)
    )
    if not unchanged:
        write_site_sums(
            memo, SiteSums(longitude, latitude, records, sums), thinned=thinned, cell_degrees=cell_degrees
        )
    return sums
