"""The outliers test: a record far from the rest of its species (CoordinateCleaner's cc_outl, "quantile").

A record's mean great-circle distance to the species' other records is compared with the distribution of
those means over all the species' records: above quantile 0.75 + multiplier x IQR (quantiles interpolated
as R's default, numpy's "linear") it is flagged. Records at one point share their mean, so the distances
are taken between distinct points, weighted by their records; a species with more distinct points than
``exact_up_to_points`` is thinned to the centres of square cells of ``cell_degrees`` (CoordinateCleaner
thins to 0.5-degree cells above 10,000 records), so the work is at most that many squared, never the
records squared. Dagster-free: numpy over the distinct points, in blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The sphere PostGIS measures great-circle distances on (its mean radius, metres).
EARTH_RADIUS_M = 6_371_008.7714
# Rows of the distance matrix computed at once: BLOCK_ROWS x sites doubles (80 MB at 10,000 sites).
BLOCK_ROWS = 1000
# Means are rounded to the millimetre before they are compared, so the last bits of a platform's
# trigonometry cannot decide a flag.
MEAN_DECIMALS = 3


@dataclass(frozen=True)
class OutlierParameters:
    multiplier: float
    min_records: int
    exact_up_to_points: int
    cell_degrees: float


def outlier_points(
    longitude: np.ndarray, latitude: np.ndarray, records: np.ndarray, parameters: OutlierParameters
) -> np.ndarray | None:
    """For distinct points (with their record counts): whether each is an outlier; None when the species
    has fewer records with a point than ``min_records`` (the test is not evaluated)."""
    total = int(records.sum())
    if total < max(parameters.min_records, 2):
        return None
    if len(longitude) > parameters.exact_up_to_points:
        cell = parameters.cell_degrees
        site_lon = (np.floor(longitude / cell) + 0.5) * cell
        site_lat = (np.floor(latitude / cell) + 0.5) * cell
        sites, site_of_point = np.unique(np.stack([site_lon, site_lat], axis=1), axis=0, return_inverse=True)
        site_of_point = site_of_point.reshape(-1)
        site_records = np.bincount(site_of_point, weights=records, minlength=len(sites))
        means = _mean_distances(sites[:, 0], sites[:, 1], site_records, total)[site_of_point]
    else:
        means = _mean_distances(longitude, latitude, records.astype(np.float64), total)
    means = np.round(means, MEAN_DECIMALS)
    per_record = np.repeat(means, records)
    low, high = np.percentile(per_record, [25, 75])
    limit = high + parameters.multiplier * (high - low)
    flagged: np.ndarray = means > limit
    return flagged


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
