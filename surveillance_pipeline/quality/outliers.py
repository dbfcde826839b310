"""The outliers test: a record far from the rest of its species (CoordinateCleaner's cc_outl, "quantile").

A record's mean great-circle distance to the species' other records is compared with the distribution of
those means over all the species' records: above quantile 0.75 + multiplier x IQR (quantiles interpolated
as R's default, numpy's "linear") it is flagged. Records at one site share their mean, so the distances are
taken between sites weighted by their records: the distinct points, or, for a species with more distinct
points than the exact limit, the centres of square cells (CoordinateCleaner thins to 0.5-degree cells
above 10,000 records), which the warehouse groups before anything reaches Python. So the work is at most
the limit squared, and the memory the sites', never the records'. Dagster-free: numpy, in blocks.
"""

from __future__ import annotations

import numpy as np

# The sphere PostGIS measures great-circle distances on (its mean radius, metres).
EARTH_RADIUS_M = 6_371_008.7714
# Rows of the distance matrix computed at once: BLOCK_ROWS x sites doubles (80 MB at 10,000 sites).
BLOCK_ROWS = 1000
# Means are rounded to the millimetre before they are compared, so the last bits of a platform's
# trigonometry cannot decide a flag.
MEAN_DECIMALS = 3


def outlier_sites(
    longitude: np.ndarray, latitude: np.ndarray, records: np.ndarray, multiplier: float, min_records: int
) -> np.ndarray | None:
    """For sites (with their record counts): whether the records at each are outliers; None when the
    species has fewer records with a point than ``min_records`` (the test is not evaluated)."""
    weights = records.astype(np.float64)
    total = int(records.sum())
    if total < max(min_records, 2):
        return None
    means = np.round(_mean_distances(longitude, latitude, weights, total), MEAN_DECIMALS)
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


def _mean_distances(
    longitude: np.ndarray, latitude: np.ndarray, weights: np.ndarray, total: int
) -> np.ndarray:
    """Per site, the weighted sum of its great-circle distances to every site over ``total - 1`` (a
    record's own site adds 0): its records' mean distance to the species' other records."""
    lon = np.radians(longitude)
    lat = np.radians(latitude)
    cos_lat = np.cos(lat)
    sums = np.empty(len(lon))
    for start in range(0, len(lon), BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, len(lon))
        # Haversine: stable for the short distances most pairs of a species have.
        half_dlat = (lat[None, :] - lat[start:stop, None]) / 2
        half_dlon = (lon[None, :] - lon[start:stop, None]) / 2
        h = np.sin(half_dlat) ** 2 + cos_lat[start:stop, None] * cos_lat[None, :] * np.sin(half_dlon) ** 2
        distance = 2 * EARTH_RADIUS_M * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))
        sums[start:stop] = distance @ weights
    result: np.ndarray = sums / (total - 1)
    return result
