"""A GBIF-shaped Darwin Core Archive of any size, written in a stream: the bench's download input.

``write_gbif_dwca(path, records, seed)`` writes the zip GBIF's download service would send for "all
occurrences in Tasmania of the registry's species": ``occurrence.txt`` (the interpreted core, tab-separated,
no quoting, one header line of term names), ``meta.xml`` naming every column's term, ``metadata.xml`` (EML
with the download's key, DOI and query), ``rights.txt`` and ``citations.txt``. No row is held longer than
its chunk: rows are built ``CHUNK_ROWS`` at a time from numpy arrays and a writer thread deflates one chunk
while the next is built (zlib releases the GIL).

The columns are GBIF's: the 225 of a 2014 DwC-A download's core (rgbif's 0000066-140928181241064, copied
below in its order) followed by the 52 GBIF added since (from ``/v1/occurrence/download/describe/dwca``,
``interpreted``): 277 columns. As in real downloads most of them are empty in most rows; the filled ones
carry plausible values, so a row of occurrence.txt is about 1.3 kB.

The records: ``gbifID`` unique and in no particular order (an affine permutation of the row number); species
drawn Zipf-like over the registry (a few species hold most records); ``taxonKey``, ``speciesKey`` and
``acceptedTaxonKey`` are the registry's backbone key (a stand-in key ``STAND_IN_TAXON_KEY + species_id``
for a species the registry has not matched yet, whose records are found by ``species`` name); coordinates
inside Tasmania at 2–6 decimals, ~5 % empty and a few at 0,0 flagged ZERO_COORDINATE; years 1900..2025
leaning recent, ~3 % empty; one of GBIF's three license URIs per dataset.

Deterministic for ``(records, seed)``: every draw comes from numpy's PCG64 seeded with ``seed`` (the
universe of datasets and names) or ``[seed, chunk]`` (each chunk's rows), and the zip's timestamps are fixed,
so the same arguments give the same bytes on every machine. ``GENERATOR_VERSION`` names the output: change
it whenever a change here changes the bytes (the bench caches zips by records, seed and version).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import queue
import shutil
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from surveillance_pipeline.gbif.registry import Species, load_registry

GENERATOR_VERSION = 1
CHUNK_ROWS = 50_000
# Created 2026-11-30: the key's timestamp, the EML's pubDate and every zip entry's date.
CREATED = (2026, 11, 30)
ZIP_DATE = (*CREATED, 0, 0, 0)
COMPRESS_LEVEL = 6
STAND_IN_TAXON_KEY = 9_900_000
FIRST_GBIF_ID = 1_000_000_000
LATITUDES = (-43.6, -40.6)
LONGITUDES = (144.6, 148.5)
MISSING_COORDINATES = 0.05
ZERO_COORDINATES = 0.002
MISSING_YEAR = 0.03
YEARS = (1900, 2025)
SPECIES_ZIPF = 1.1
DATASETS = 40

DCTERMS = "http://purl.org/dc/terms/"
DWC = "http://rs.tdwg.org/dwc/terms/"
GBIF = "http://rs.gbif.org/terms/1.0/"
GADM = "http://rs.gbif.org/terms/gadm/3.0/"
IUCN = "http://iucn.org/terms/"


def _terms(*runs: tuple[str, str]) -> tuple[str, ...]:
    return tuple(namespace + name for namespace, names in runs for name in names.split())


# The core of GBIF download 0000066-140928181241064 (2014), in its meta.xml order.
TERMS_2014 = _terms(
    (GBIF, "gbifID"),
    (
        DCTERMS,
        "abstract accessRights accrualMethod accrualPeriodicity accrualPolicy alternative audience "
        "available bibliographicCitation conformsTo contributor coverage created creator date "
        "dateAccepted dateCopyrighted dateSubmitted description educationLevel extent format hasFormat "
        "hasPart hasVersion identifier instructionalMethod isFormatOf isPartOf isReferencedBy "
        "isReplacedBy isRequiredBy isVersionOf issued language license mediator medium modified "
        "provenance publisher references relation replaces requires rights rightsHolder source spatial "
        "subject tableOfContents temporal title type valid",
    ),
    (
        DWC,
        "acceptedNameUsage acceptedNameUsageID associatedOccurrences associatedReferences "
        "associatedSequences associatedTaxa basisOfRecord bed behavior catalogNumber class collectionCode "
        "collectionID continent countryCode county dataGeneralizations datasetID datasetName "
        "dateIdentified day decimalLatitude decimalLongitude disposition dynamicProperties "
        "earliestAgeOrLowestStage earliestEonOrLowestEonothem earliestEpochOrLowestSeries "
        "earliestEraOrLowestErathem earliestPeriodOrLowestSystem endDayOfYear establishmentMeans "
        "eventDate eventID eventRemarks eventTime family fieldNotes fieldNumber footprintSRS "
        "footprintSpatialFit footprintWKT formation genus geologicalContextID georeferencedDate "
        "georeferenceProtocol georeferenceRemarks georeferenceSources georeferenceVerificationStatus "
        "georeferencedBy group habitat higherClassification higherGeography higherGeographyID "
        "highestBiostratigraphicZone identificationID identificationQualifier identificationReferences "
        "identificationRemarks identificationVerificationStatus identifiedBy individualCount individualID "
        "informationWithheld infraspecificEpithet institutionCode institutionID island islandGroup "
        "kingdom latestAgeOrHighestStage latestEonOrHighestEonothem latestEpochOrHighestSeries "
        "latestEraOrHighestErathem latestPeriodOrHighestSystem lifeStage lithostratigraphicTerms locality "
        "locationAccordingTo locationID locationRemarks lowestBiostratigraphicZone materialSampleID "
        "maximumDistanceAboveSurfaceInMeters member minimumDistanceAboveSurfaceInMeters month "
        "municipality nameAccordingTo nameAccordingToID namePublishedIn namePublishedInID "
        "namePublishedInYear nomenclaturalCode nomenclaturalStatus occurrenceDetails occurrenceID "
        "occurrenceRemarks occurrenceStatus order originalNameUsage originalNameUsageID "
        "otherCatalogNumbers ownerInstitutionCode parentNameUsage parentNameUsageID phylum "
        "pointRadiusSpatialFit preparations previousIdentifications recordNumber recordedBy "
        "reproductiveCondition samplingEffort samplingProtocol scientificName scientificNameID sex "
        "specificEpithet startDayOfYear stateProvince subgenus taxonConceptID taxonID taxonRank "
        "taxonRemarks taxonomicStatus typeStatus verbatimCoordinateSystem verbatimDepth verbatimElevation "
        "verbatimEventDate verbatimLocality verbatimSRS verbatimTaxonRank vernacularName waterBody year",
    ),
    (
        GBIF,
        "datasetKey publishingCountry lastInterpreted coordinateAccuracy elevation elevationAccuracy "
        "depth depthAccuracy distanceAboveSurface distanceAboveSurfaceAccuracy issue mediaType "
        "hasCoordinate hasGeospatialIssues taxonKey kingdomKey phylumKey classKey orderKey familyKey "
        "genusKey subgenusKey speciesKey species genericName typifiedName protocol lastParsed lastCrawled",
    ),
)
# What GBIF's interpreted core has gained since (describe/dwca, 2025), minus names the 2014 list has.
TERMS_ADDED = _terms(
    (
        DWC,
        "recordedByID organismQuantity organismQuantityType caste vitality degreeOfEstablishment pathway "
        "organismID organismName organismScope associatedOrganisms organismRemarks materialEntityID "
        "materialEntityRemarks verbatimLabel parentEventID eventType sampleSizeValue sampleSizeUnit "
        "verticalDatum coordinateUncertaintyInMeters coordinatePrecision verbatimIdentification "
        "identifiedByID superfamily subfamily tribe subtribe infragenericEpithet cultivarEpithet",
    ),
    (
        GBIF,
        "distanceFromCentroidInMeters taxonomicIssue nonTaxonomicIssue acceptedTaxonKey "
        "acceptedScientificName verbatimScientificName isInvasive repatriated relativeOrganismQuantity "
        "projectId isSequenced gbifRegion publishedByGbifRegion",
    ),
    (GADM, "level0Gid level0Name level1Gid level1Name level2Gid level2Name level3Gid level3Name"),
    (IUCN, "iucnRedListCategory"),
)
TERMS = TERMS_2014 + TERMS_ADDED
COLUMNS = tuple(term.rsplit("/", 1)[-1] for term in TERMS)
# Columns GBIF declares as lists (meta.xml's delimitedBy).
DELIMITED = frozenset(
    "datasetID datasetName recordedBy recordedByID preparations associatedSequences otherCatalogNumbers "
    "samplingProtocol higherGeography georeferencedBy identifiedBy identifiedByID issue mediaType "
    "projectId".split()
)

LICENSE_URIS = (
    "http://creativecommons.org/licenses/by/4.0/legalcode",
    "http://creativecommons.org/licenses/by-nc/4.0/legalcode",
    "http://creativecommons.org/publicdomain/zero/1.0/legalcode",
)
LICENSE_WEIGHTS = (0.55, 0.2, 0.25)
# Tasmania's 29 local government areas (GADM level 2 under AUS.9_1).
MUNICIPALITIES = (
    "Break O'Day|Brighton|Burnie|Central Coast|Central Highlands|Circular Head|Clarence|Derwent Valley|"
    "Devonport|Dorset|Flinders|George Town|Glamorgan-Spring Bay|Glenorchy|Hobart|Huon Valley|Kentish|"
    "King Island|Kingborough|Latrobe|Launceston|Meander Valley|Northern Midlands|Sorell|Southern Midlands|"
    "Tasman|Waratah-Wynyard|West Coast|West Tamar"
).split("|")
PLACES = (
    "Mount Wellington|Cradle Mountain|Freycinet Peninsula|Bruny Island|Maria Island|Mount Field|"
    "Lake St Clair|Tasman Peninsula|Ben Lomond|Narawntapu|Arthur River|Tarkine|Hartz Mountains|"
    "Douglas-Apsley|Mount William|Rocky Cape|Cataract Gorge|Derwent River|Tamar River|Huon River|"
    "Waterworks Reserve|Knocklofty Reserve|Melaleuca|Lake Pedder|Macquarie Harbour|Frenchmans Cap|"
    "Wineglass Bay|Bay of Fires|Liffey Falls|Russell Falls|Tahune|Gordon River|Pieman River|Mount Roland"
).split("|")
TOWNS = (
    "Hobart|Launceston|Devonport|Burnie|Queenstown|Strahan|Deloraine|Swansea|St Helens|Orford|"
    "Geeveston|Cygnet|Kettering|Richmond|Campbell Town|Ross|Oatlands|Bicheno|Stanley|Smithton|Zeehan|"
    "Tullah|Maydena|New Norfolk|Huonville|Scottsdale|George Town|Sheffield|Dover|Triabunna"
).split("|")
FEATURES = "creek|track|saddle|lagoon|swamp|headland|beach|car park|picnic area|ridge|gully|rivulet".split(
    "|"
)
DIRECTIONS = "N NE E SE S SW W NW".split()
GIVEN = "A. B. C. D. E. F. G. H. J. K. L. M. N. P. R. S. T. W.".split()
SURNAMES = (
    "Smith Jones Brown Wilson Taylor Johnson White Martin Anderson Thompson Walker Harris Clarke Lewis "
    "Robinson Hall Young Allen King Wright Scott Green Baker Adams Mitchell Campbell Roberts Carter "
    "Phillips Evans Turner Parker Collins Edwards Stewart Morris Murphy Cook Rogers Morgan Cooper Peterson"
).split()
AUTHORS = (
    "(Boitard, 1841)|(Harris, 1808)|(Shaw, 1799)|Gould, 1845|(Kerr, 1792)|(Desmarest, 1817)|"
    "Labill.|Hook.f.|F.Muell.|(Dunal) Spach|R.Br.|Linnaeus, 1758|(Linnaeus, 1758)|Ogilby, 1838|"
    "(Latham, 1801)|(Gray, 1841)|Vigors & Horsfield, 1827|(Temminck, 1827)|Gunn, 1851|L."
).split("|")
REMARKS = (
    "seen crossing road|roadkill|scat only|heard calling|juvenile with adult|photographed at dusk|"
    "in leaf litter|on track edge|camera trap image|dead on beach|flowering|fruiting|"
    "several individuals|nest observed|tracks in mud|identified from photo"
).split("|")
HABITATS = (
    "wet sclerophyll forest|dry sclerophyll forest|buttongrass moorland|coastal heath|rainforest|"
    "alpine heath|grassland|farmland|urban parkland|riparian|saltmarsh|sedgeland"
).split("|")
PROTOCOLS = "Visual observation|Camera trap|Spotlighting|Pitfall trap|Call playback|Hand collection".split(
    "|"
)
ISSUES_WITH_COORDINATES = (
    ("", 0.35),
    ("GEODETIC_DATUM_ASSUMED_WGS84", 0.2),
    ("COORDINATE_ROUNDED;GEODETIC_DATUM_ASSUMED_WGS84", 0.15),
    ("CONTINENT_DERIVED_FROM_COORDINATES;GEODETIC_DATUM_ASSUMED_WGS84", 0.1),
    ("COORDINATE_ROUNDED", 0.08),
    ("INSTITUTION_MATCH_FUZZY;COLLECTION_MATCH_NONE;GEODETIC_DATUM_ASSUMED_WGS84", 0.05),
    ("MULTIMEDIA_URI_INVALID", 0.03),
    ("TAXON_MATCH_FUZZY;GEODETIC_DATUM_ASSUMED_WGS84", 0.02),
    ("RECORDED_DATE_INVALID;COORDINATE_ROUNDED", 0.02),
)
ISSUES_WITHOUT_COORDINATES = (
    ("", 0.7),
    ("RECORDED_DATE_INVALID", 0.1),
    ("INSTITUTION_MATCH_FUZZY;COLLECTION_MATCH_NONE", 0.1),
    ("TAXON_MATCH_FUZZY", 0.1),
)
ZERO_ISSUES = "COUNTRY_COORDINATE_MISMATCH;ZERO_COORDINATE"
CLASSES = {
    "Animalia": ("Chordata", "44", ("Mammalia", "Aves", "Squamata", "Amphibia", "Actinopterygii")),
    "Plantae": ("Tracheophyta", "7707728", ("Magnoliopsida", "Pinopsida", "Polypodiopsida")),
}
IUCN_CATEGORIES = ("LC", "LC", "LC", "NT", "VU", "EN", "NE")
# Columns that are the same in every row (everything else not filled by _chunk_values is empty).
CONSTANT = {
    "countryCode": "AU",
    "stateProvince": "Tasmania",
    "occurrenceStatus": "PRESENT",
    "taxonRank": "SPECIES",
    "taxonomicStatus": "ACCEPTED",
    "gbifRegion": "OCEANIA",
    "isSequenced": "false",
}


@dataclass(frozen=True)
class GeneratedDownload:
    """One generated zip and what it holds."""

    path: Path
    key: str
    doi: str
    records: int
    seed: int
    version: int
    zip_bytes: int
    occurrence_bytes: int
    seconds: float
    records_per_species: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "key": self.key,
            "doi": self.doi,
            "records": self.records,
            "seed": self.seed,
            "version": self.version,
            "zip_bytes": self.zip_bytes,
            "occurrence_bytes": self.occurrence_bytes,
            "seconds": round(self.seconds, 3),
            "records_per_species": self.records_per_species,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GeneratedDownload:
        return cls(**{**data, "path": Path(data["path"])})


def download_identity(records: int, seed: int) -> tuple[str, str]:
    """(GBIF download key, DOI) for a generated download: ``NNNNNNN-261130HHMMSSmmm``, ``10.15468/dl.xxxxxx``.

    The key sorts like GBIF's (sequence number, then creation time) and is read back by the project's reader
    from the zip's name; the DOI is what GBIF would have minted for it.
    """
    digest = hashlib.sha256(f"bench-download|{records}|{seed}|{GENERATOR_VERSION}".encode()).digest()
    number = int.from_bytes(digest[:8], "big")
    sequence = number % 10_000_000
    seconds_of_day = (number // 10_000_000) % 86_400
    millis = (number // 10_000_000 // 86_400) % 1000
    hours, rest = divmod(seconds_of_day, 3600)
    stamp = (
        f"{CREATED[0] % 100:02d}{CREATED[1]:02d}{CREATED[2]:02d}{hours:02d}{rest // 60:02d}{rest % 60:02d}"
    )
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    suffix = "".join(alphabet[b % len(alphabet)] for b in digest[8:14])
    return f"{sequence:07d}-{stamp}{millis:03d}", f"10.15468/dl.{suffix}"


# ---------------------------------------------------------------------------------------------------------
# The universe a download's rows are drawn from: species with their weights, datasets, name pools.


def _objects(values: list[str] | tuple[str, ...]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = list(values)
    return array


def _uuid(rng: np.random.Generator) -> str:
    text = rng.bytes(16).hex()
    return f"{text[:8]}-{text[8:12]}-4{text[13:16]}-a{text[17:20]}-{text[20:32]}"


def taxon_key_of(species: Species) -> int:
    return species.taxon_key if species.taxon_key is not None else STAND_IN_TAXON_KEY + species.species_id


@dataclass
class _Universe:
    """Everything per species and per dataset, as arrays a chunk indexes with its draws."""

    registry: tuple[Species, ...]
    species_weights: np.ndarray
    species: dict[str, np.ndarray]
    dataset_weights: np.ndarray
    datasets: dict[str, np.ndarray]
    id_modulus: int
    id_multiplier: int
    id_offset: int
    recorded_by: np.ndarray
    localities: np.ndarray
    interpreted: np.ndarray
    municipality_gids: np.ndarray
    municipalities: np.ndarray


def _next_prime(n: int) -> int:
    candidate = max(n, 3) | 1
    while any(candidate % d == 0 for d in range(3, int(candidate**0.5) + 1, 2)):
        candidate += 2
    return candidate


def _universe(records: int, seed: int) -> _Universe:
    rng = np.random.Generator(np.random.PCG64(seed))
    registry = load_registry()
    count = len(registry)
    # Zipf over a seeded ranking of the species: a few hold most of the records.
    ranks = rng.permutation(count) + 1
    weights = 1.0 / ranks.astype(float) ** SPECIES_ZIPF
    species_columns: dict[str, list[str]] = {name: [] for name in ("scientificName", "verbatim", "genus")}
    for name in ("epithet", "kingdom", "phylum", "class", "order", "family", "higherClassification"):
        species_columns[name] = []
    for name in ("vernacularName", "iucn", "taxonKey", "kingdomKey", "phylumKey", "classKey", "orderKey"):
        species_columns[name] = []
    for name in ("familyKey", "genusKey", "taxonID", "informationWithheld", "dataGeneralizations"):
        species_columns[name] = []
    for species in registry:
        genus, epithet = species.scientific_name.split(" ", 1)
        phylum, phylum_key, classes = CLASSES.get(species.kingdom, CLASSES["Animalia"])
        class_name = classes[int(rng.integers(len(classes)))]
        family = genus[:-1] + "idae" if species.kingdom == "Animalia" else genus[:-1] + "aceae"
        order = genus[:4] + ("iformes" if species.kingdom == "Animalia" else "ales")
        sensitive = rng.random() < 0.1
        values = {
            "scientificName": f"{species.scientific_name} {AUTHORS[int(rng.integers(len(AUTHORS)))]}",
            "verbatim": species.scientific_name,
            "genus": genus,
            "epithet": epithet,
            "kingdom": species.kingdom,
            "phylum": phylum,
            "class": class_name,
            "order": order,
            "family": family,
            "higherClassification": f"{species.kingdom} | {phylum} | {class_name} | {order} | {family}",
            "vernacularName": species.vernacular_name,
            "iucn": IUCN_CATEGORIES[int(rng.integers(len(IUCN_CATEGORIES)))],
            "taxonKey": str(taxon_key_of(species)),
            "kingdomKey": "1" if species.kingdom == "Animalia" else "6",
            "phylumKey": phylum_key,
            "classKey": str(int(rng.integers(100, 11_000))),
            "orderKey": str(int(rng.integers(400, 1_500))),
            "familyKey": str(int(rng.integers(2_000, 9_800))),
            "genusKey": str(int(rng.integers(2_400_000, 8_000_000))),
            "taxonID": f"urn:lsid:biodiversity.org.au:afd.taxon:{_uuid(rng)}",
            "informationWithheld": "Coordinates generalised to 0.1 degree" if sensitive else "",
            "dataGeneralizations": "Coordinates rounded to 0.1 degree" if sensitive else "",
        }
        for name, value in values.items():
            species_columns[name].append(value)

    dataset_ranks = np.arange(1, DATASETS + 1, dtype=float)
    dataset_weights = 1.0 / dataset_ranks**1.3
    dataset_columns: dict[str, list[str]] = {}

    def put(name: str, value: str) -> None:
        dataset_columns.setdefault(name, []).append(value)

    bases = ("HUMAN_OBSERVATION", "PRESERVED_SPECIMEN", "HUMAN_OBSERVATION", "MACHINE_OBSERVATION")
    for index in range(DATASETS):
        kind = index % 4
        code = "".join(chr(65 + int(c)) for c in rng.integers(0, 26, 4))
        key = _uuid(rng)
        put("datasetKey", key)
        put("datasetName", f"{('Observations', 'Specimens', 'Surveys', 'Camera traps')[kind]} of {code}")
        put("institutionCode", ("iNaturalist", "TMAG", "DPIPWE", "UTAS")[kind] + ("" if index < 4 else code))
        put("collectionCode", ("Observations", f"Z{code}", f"NVA-{code}", "CT")[kind])
        put("basisOfRecord", bases[kind])
        put("license", LICENSE_URIS[int(rng.choice(3, p=LICENSE_WEIGHTS))])
        put("rightsHolder", f"{code} contributors" if kind != 1 else "Tasmanian Museum and Art Gallery")
        put("protocol", "DWC_ARCHIVE" if rng.random() < 0.9 else "BIOCASE")
        country = "AU" if rng.random() < 0.8 else ("US", "GB", "DE")[int(rng.integers(3))]
        put("publishingCountry", country)
        put("repatriated", "false" if country == "AU" else "true")
        put("publishedByGbifRegion", "OCEANIA" if country == "AU" else "EUROPE")
        put(
            "occurrenceID",
            ("https://www.inaturalist.org/observations/", f"urn:catalog:TMAG:{code}:")[kind % 2],
        )
        put("references", "https://www.inaturalist.org/observations/" if kind == 0 else "")
        put("institutionID", f"https://ror.org/0{rng.bytes(4).hex()}" if kind == 1 else "")
        put("language", "en" if rng.random() < 0.6 else "")
        put("accessRights", "Open access" if rng.random() < 0.3 else "")
        put("type", ("Event", "PhysicalObject", "Event", "StillImage")[kind])
        put("media", "StillImage" if kind in (0, 3) else "")
        put("preparations", "whole animal (ethanol)" if kind == 1 else "")
        put("georeferenceVerificationStatus", "verified by data custodian" if kind == 2 else "")
        put("georeferenceSources", "GPS" if kind in (0, 2) else "")
        put("flags", str(kind))
        resource = int(rng.integers(100, 2_000))
        put(
            "datasetID",
            f"https://collections.ala.org.au/public/show/dr{resource}" if rng.random() < 0.6 else "",
        )
        put("collectionID", f"urn:lsid:biocol.org:col:{resource + 30_000}" if kind == 1 else "")
        put("ownerInstitutionCode", "TMAG" if kind == 1 else "")
        put("georeferenceProtocol", "Georeferenced with GPS (WGS84)" if kind == 2 else "")
        citation = f"{code} contributors ({2010 + index % 15}). {dataset_columns['datasetName'][-1]}."
        put("bibliographicCitation", f"{citation} Occurrence dataset" if index % 2 else "")
        day, hour, minute, second = (
            int(rng.integers(1, 29)),
            int(rng.integers(24)),
            int(rng.integers(60)),
            0,
        )
        put(
            "lastCrawled",
            f"2026-11-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{int(rng.integers(1000)):03d}Z",
        )

    recorded_by = [
        f"{GIVEN[int(rng.integers(len(GIVEN)))]} {SURNAMES[int(rng.integers(len(SURNAMES)))]}"
        + (
            f";{GIVEN[int(rng.integers(len(GIVEN)))]} {SURNAMES[int(rng.integers(len(SURNAMES)))]}"
            if i % 7 == 0
            else ""
        )
        for i in range(600)
    ]
    localities = []
    for _ in range(4000):
        shape = int(rng.integers(5))
        place = PLACES[int(rng.integers(len(PLACES)))]
        town = TOWNS[int(rng.integers(len(TOWNS)))]
        feature = FEATURES[int(rng.integers(len(FEATURES)))]
        distance = int(rng.integers(1, 40))
        direction = DIRECTIONS[int(rng.integers(len(DIRECTIONS)))]
        localities.append(
            (
                f"{place}",
                f"{distance} km {direction} of {town}",
                f"{place}, {feature}",
                f"{feature} near {town}, {place}",
                f"{town}, {distance} km {direction} on {place} {feature}",
            )[shape]
        )
    interpreted = [
        f"2026-{int(rng.integers(9, 12)):02d}-{int(rng.integers(1, 29)):02d}T{int(rng.integers(24)):02d}:"
        f"{int(rng.integers(60)):02d}:{int(rng.integers(60)):02d}.{int(rng.integers(1000)):03d}Z"
        for _ in range(2000)
    ]
    modulus = _next_prime(3 * records + 1000)
    return _Universe(
        registry=registry,
        species_weights=weights / weights.sum(),
        species={name: _objects(values) for name, values in species_columns.items()},
        dataset_weights=dataset_weights / dataset_weights.sum(),
        datasets={name: _objects(values) for name, values in dataset_columns.items()},
        id_modulus=modulus,
        id_multiplier=int(rng.integers(modulus // 3, modulus - 1)),
        id_offset=int(rng.integers(0, modulus)),
        recorded_by=_objects(recorded_by),
        localities=_objects(localities),
        interpreted=_objects(interpreted),
        municipality_gids=_objects([f"AUS.9.{i + 1}_1" for i in range(len(MUNICIPALITIES))]),
        municipalities=_objects(MUNICIPALITIES),
    )


# ---------------------------------------------------------------------------------------------------------
# One chunk of rows


_NUMBERS = _objects([str(i) for i in range(400)])
_TWO_DIGITS = _objects([f"{i:02d}" for i in range(400)])
_DAYS_BEFORE_MONTH = np.array([0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334], dtype=np.int64)


def _pick(rng: np.random.Generator, n: int, choices: tuple[tuple[str, float], ...]) -> np.ndarray:
    values = _objects([value for value, _ in choices])
    weights = np.array([weight for _, weight in choices])
    return values[rng.choice(len(values), size=n, p=weights / weights.sum())]


def _sometimes(rng: np.random.Generator, values: np.ndarray, share: float) -> np.ndarray:
    """``values`` where a draw falls under ``share``, else empty."""
    return np.where(rng.random(len(values)) < share, values, "")


def _floats(values: np.ndarray) -> np.ndarray:
    """Shortest round-trip text of each float (GBIF writes ``-42.12`` as ``-42.12``)."""
    return values.astype(str).astype(object)


def _chunk_values(u: _Universe, rng: np.random.Generator, start: int, n: int) -> dict[str, Any]:
    """The filled columns of rows ``start``..``start + n``: each a list or object array of n strings."""
    rows = np.arange(start, start + n, dtype=np.int64)
    ids = FIRST_GBIF_ID + (u.id_multiplier * rows + u.id_offset) % u.id_modulus
    sp = rng.choice(len(u.registry), size=n, p=u.species_weights)
    # The first rows take every species once: each partition has records, however small the download.
    sp = np.where(rows < len(u.registry), rows % len(u.registry), sp)
    ds = rng.choice(len(u.dataset_weights), size=n, p=u.dataset_weights)
    S, D = u.species, u.datasets
    kind = D["flags"][ds]
    values: dict[str, Any] = {"gbifID": ids.astype(str).astype(object), "species_index": sp}

    # Where and when
    draw = rng.random(n)
    missing = draw < MISSING_COORDINATES
    zero = (draw >= MISSING_COORDINATES) & (draw < MISSING_COORDINATES + ZERO_COORDINATES)
    placed = ~(missing | zero)
    scale = 10.0 ** rng.integers(2, 7, n)
    latitude = _floats(np.round(rng.uniform(*LATITUDES, n) * scale) / scale)
    longitude = _floats(np.round(rng.uniform(*LONGITUDES, n) * scale) / scale)
    values["decimalLatitude"] = np.where(missing, "", np.where(zero, "0.0", latitude))
    values["decimalLongitude"] = np.where(missing, "", np.where(zero, "0.0", longitude))
    values["hasCoordinate"] = np.where(missing, "false", "true")
    values["hasGeospatialIssues"] = np.where(zero, "true", "false")
    uncertainty = _pick(
        rng, n, (("", 3), ("5.0", 2), ("10.0", 2), ("30.0", 1), ("100.0", 1), ("1000.0", 1), ("10000.0", 0.5))
    )
    values["coordinateUncertaintyInMeters"] = np.where(missing, "", uncertainty)
    issues = np.where(
        missing,
        _pick(rng, n, ISSUES_WITHOUT_COORDINATES),
        np.where(zero, ZERO_ISSUES, _pick(rng, n, ISSUES_WITH_COORDINATES)),
    )
    values["issue"] = values["nonTaxonomicIssue"] = issues
    values["continent"] = np.where(placed, "OCEANIA", "")
    municipality = rng.integers(0, len(u.municipalities), n)
    for column, value in (("level0Gid", "AUS"), ("level0Name", "Australia"), ("level1Gid", "AUS.9_1")):
        values[column] = np.where(placed, value, "")
    values["level1Name"] = np.where(placed, "Tasmania", "")
    values["level2Gid"] = np.where(placed, u.municipality_gids[municipality], "")
    values["level2Name"] = np.where(placed, u.municipalities[municipality], "")
    locality = u.localities[rng.integers(0, len(u.localities), n)]
    values["locality"] = _sometimes(rng, locality, 0.8)
    values["verbatimLocality"] = _sometimes(rng, locality, 0.25)
    elevation = np.where(rng.random(n) < 0.25, _floats(rng.integers(0, 1_600, n).astype(float)), "")
    values["elevation"] = elevation
    values["elevationAccuracy"] = np.where(elevation != "", "0.0", "")
    values["distanceFromCentroidInMeters"] = np.where(
        placed & (rng.random(n) < 0.05), _floats(np.round(rng.uniform(10, 30_000, n), 1)), ""
    )

    age = np.minimum(rng.exponential(18.0, n).astype(np.int64), YEARS[1] - YEARS[0])
    year = YEARS[1] - age
    month = rng.integers(1, 13, n)
    day = rng.integers(1, 29, n)
    dated = rng.random(n) >= MISSING_YEAR
    year_text = year.astype(str).astype(object)
    month_text, day_text = _TWO_DIGITS[month], _TWO_DIGITS[day]
    hour = rng.integers(6, 20, n)
    minute = rng.integers(0, 60, n)
    timed = rng.random(n) < 0.5
    date = year_text + "-" + month_text + "-" + day_text
    event_date = np.where(timed, date + "T" + _TWO_DIGITS[hour] + ":" + _TWO_DIGITS[minute] + ":00", date)
    values["eventDate"] = np.where(dated, event_date, "")
    values["year"] = np.where(dated, year_text, "")
    values["month"] = np.where(dated, _NUMBERS[month], "")
    values["day"] = np.where(dated, _NUMBERS[day], "")
    day_of_year = _NUMBERS[_DAYS_BEFORE_MONTH[month - 1] + day]
    values["startDayOfYear"] = values["endDayOfYear"] = np.where(dated, day_of_year, "")
    values["verbatimEventDate"] = np.where(
        dated & (rng.random(n) < 0.2), day_text + "/" + month_text + "/" + year_text, ""
    )
    values["dateIdentified"] = np.where(dated & (rng.random(n) < 0.3), date + "T00:00:00", "")
    values["eventTime"] = np.where(
        dated & timed & (rng.random(n) < 0.3), _TWO_DIGITS[hour] + ":" + _TWO_DIGITS[minute] + ":00", ""
    )

    # What, by whom, from which dataset
    for column, source in (
        ("scientificName", "scientificName"),
        ("acceptedScientificName", "scientificName"),
        ("verbatimScientificName", "verbatim"),
        ("species", "verbatim"),
        ("genus", "genus"),
        ("genericName", "genus"),
        ("specificEpithet", "epithet"),
        ("kingdom", "kingdom"),
        ("phylum", "phylum"),
        ("class", "class"),
        ("order", "order"),
        ("family", "family"),
        ("taxonKey", "taxonKey"),
        ("speciesKey", "taxonKey"),
        ("acceptedTaxonKey", "taxonKey"),
        ("kingdomKey", "kingdomKey"),
        ("phylumKey", "phylumKey"),
        ("classKey", "classKey"),
        ("orderKey", "orderKey"),
        ("familyKey", "familyKey"),
        ("genusKey", "genusKey"),
        ("iucnRedListCategory", "iucn"),
        ("informationWithheld", "informationWithheld"),
        ("dataGeneralizations", "dataGeneralizations"),
    ):
        values[column] = S[source][sp]
    values["vernacularName"] = np.where(kind == "0", S["vernacularName"][sp], "")
    values["higherClassification"] = np.where(kind == "1", S["higherClassification"][sp], "")
    values["taxonID"] = np.where(kind == "2", S["taxonID"][sp], "")
    for column in (
        "datasetKey",
        "datasetName",
        "institutionCode",
        "collectionCode",
        "basisOfRecord",
        "license",
        "rightsHolder",
        "protocol",
        "publishingCountry",
        "repatriated",
        "publishedByGbifRegion",
        "institutionID",
        "language",
        "accessRights",
        "type",
        "preparations",
        "georeferenceVerificationStatus",
        "georeferenceSources",
        "lastCrawled",
        "datasetID",
        "collectionID",
        "ownerInstitutionCode",
        "georeferenceProtocol",
        "bibliographicCitation",
    ):
        values[column] = D[column][ds]
    catalog = rng.integers(10_000, 300_000_000, n).astype(str).astype(object)
    values["catalogNumber"] = catalog
    values["occurrenceID"] = D["occurrenceID"][ds] + catalog
    values["references"] = np.where(kind == "0", D["references"][ds] + catalog, "")
    values["mediaType"] = _sometimes(rng, D["media"][ds], 0.7)
    recorded = u.recorded_by[rng.integers(0, len(u.recorded_by), n)]
    values["recordedBy"] = _sometimes(rng, recorded, 0.9)
    values["identifiedBy"] = np.where(rng.random(n) < 0.4, recorded, "")
    values["recordedByID"] = np.where(
        rng.random(n) < 0.05, "https://orcid.org/0000-0002-" + _TWO_DIGITS[sp] + "17-4" + _TWO_DIGITS[ds], ""
    )
    interpreted = u.interpreted[rng.integers(0, len(u.interpreted), n)]
    values["lastInterpreted"] = values["lastParsed"] = interpreted
    values["modified"] = _sometimes(rng, interpreted, 0.4)
    values["individualCount"] = _pick(rng, n, (("", 4), ("1", 4), ("2", 1), ("3", 0.5), ("12", 0.2)))
    values["sex"] = _pick(rng, n, (("", 8), ("MALE", 1), ("FEMALE", 1)))
    values["lifeStage"] = _pick(rng, n, (("", 7), ("ADULT", 2), ("JUVENILE", 1)))
    values["occurrenceRemarks"] = _sometimes(rng, _objects(REMARKS)[rng.integers(0, len(REMARKS), n)], 0.25)
    values["habitat"] = _sometimes(rng, _objects(HABITATS)[rng.integers(0, len(HABITATS), n)], 0.2)
    values["samplingProtocol"] = _sometimes(rng, _objects(PROTOCOLS)[rng.integers(0, len(PROTOCOLS), n)], 0.1)
    values["taxonomicIssue"] = _pick(
        rng, n, (("", 0.97), ("TAXON_MATCH_FUZZY", 0.02), ("TAXON_MATCH_HIGHERRANK", 0.01))
    )
    values["county"] = np.where(placed & (rng.random(n) < 0.5), values["level2Name"], "")
    values["verbatimCoordinateSystem"] = np.where(placed & (rng.random(n) < 0.4), "decimal degrees", "")
    values["verbatimSRS"] = np.where(placed & (rng.random(n) < 0.4), "EPSG:4326", "")
    values["identificationVerificationStatus"] = np.where(
        kind == "0", _pick(rng, n, (("research", 0.8), ("needs_id", 0.2))), ""
    )
    values["dynamicProperties"] = np.where(
        (kind == "0") & (rng.random(n) < 0.3),
        _pick(rng, n, (('{"captive":false,"quality_grade":"research"}', 3), ('{"captive":true}', 1))),
        "",
    )
    values["recordNumber"] = np.where(kind == "1", "RN" + catalog, "")
    return values


def _layout(filled: frozenset[str]) -> list[tuple[bool, str]]:
    """The row as segments: (True, column) filled per row, or (False, text) for a run of constant columns
    pre-joined by tabs. ``"\\t".join`` of the segments equals ``"\\t".join`` of all 277 fields, with far
    fewer items per row."""
    segments: list[tuple[bool, str]] = []
    run: list[str] = []
    for column in COLUMNS:
        if column not in filled:
            run.append(CONSTANT.get(column, ""))
            continue
        if run:
            segments.append((False, "\t".join(run)))
            run = []
        segments.append((True, column))
    if run:
        segments.append((False, "\t".join(run)))
    return segments


def _chunk_text(u: _Universe, seed: int, chunk: int, start: int, n: int) -> tuple[bytes, np.ndarray]:
    rng = np.random.Generator(np.random.PCG64([seed, chunk]))
    values = _chunk_values(u, rng, start, n)
    species = values.pop("species_index")
    unknown = values.keys() - set(COLUMNS)
    if unknown:
        raise ValueError(f"not GBIF download columns: {sorted(unknown)}")
    columns: list[Any] = []
    for filled, segment in _layout(frozenset(values)):
        if not filled:
            columns.append(itertools.repeat(segment, n))
            continue
        column = values[segment]
        columns.append(column.tolist() if isinstance(column, np.ndarray) else column)
    text = "\n".join(map("\t".join, zip(*columns, strict=False))) + "\n"
    return text.encode("utf-8"), species


# ---------------------------------------------------------------------------------------------------------
# The archive


def meta_xml() -> str:
    delimited = ' delimitedBy=";"'
    fields = "\n".join(
        f'    <field index="{index}"{delimited if column in DELIMITED else ""} term="{term}"/>'
        for index, (column, term) in enumerate(zip(COLUMNS, TERMS, strict=True))
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<archive xmlns="http://rs.tdwg.org/dwc/text/" metadata="metadata.xml">\n'
        '  <core encoding="UTF-8" fieldsTerminatedBy="\\t" linesTerminatedBy="\\n" fieldsEnclosedBy="" '
        'ignoreHeaderLines="1" rowType="http://rs.tdwg.org/dwc/terms/Occurrence">\n'
        "    <files>\n      <location>occurrence.txt</location>\n    </files>\n"
        '    <id index="0" />\n'
        f"{fields}\n  </core>\n</archive>\n"
    )


def query_json(registry: tuple[Species, ...]) -> str:
    """The download's predicate as GBIF writes it in the EML abstract."""
    keys = [str(taxon_key_of(species)) for species in registry]
    predicate = {
        "type": "and",
        "predicates": [
            {"type": "equals", "key": "COUNTRY", "value": "AU"},
            {"type": "equals", "key": "STATE_PROVINCE", "value": "Tasmania"},
            {"type": "equals", "key": "OCCURRENCE_STATUS", "value": "PRESENT"},
            {"type": "in", "key": "TAXON_KEY", "values": keys},
        ],
    }
    return json.dumps(predicate, separators=(",", ":"))


def metadata_xml(key: str, doi: str, query: str, per_dataset: list[tuple[str, int]]) -> str:
    constituents = "".join(f"{count} records from {name}<br/>" for name, count in per_dataset)
    abstract = (
        f"A dataset containing all occurrences available in GBIF matching the query: {query}<br/>"
        "The dataset includes records from the following constituent datasets. The full metadata for each "
        f"constituent is also included in this archive:<br/>{constituents}"
    )
    citation = f"GBIF.org (30 November 2026) GBIF Occurrence Download https://doi.org/{doi}"
    stamp = key.split("-")[1]
    day, time_of_day = (
        f"20{stamp[:2]}-{stamp[2:4]}-{stamp[4:6]}",
        f"{stamp[6:8]}:{stamp[8:10]}:{stamp[10:12]}",
    )
    created = f"{day}T{time_of_day}.{stamp[12:]}+00:00"
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<eml:eml xmlns:eml="eml://ecoinformatics.org/eml-2.1.1" xmlns:dc="http://purl.org/dc/terms/" '
        'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
        'xsi:schemaLocation="eml://ecoinformatics.org/eml-2.1.1 '
        'http://rs.gbif.org/schema/eml-gbif-profile/1.2/eml.xsd" '
        f'packageId={quoteattr(doi)} system="http://gbif.org" scope="system" xml:lang="en">\n'
        "<dataset>\n"
        f"  <alternateIdentifier>{escape(key)}</alternateIdentifier>\n"
        f"  <alternateIdentifier>{escape(doi)}</alternateIdentifier>\n"
        f"  <title>GBIF Occurrence Download {escape(key)}</title>\n"
        "  <creator><organizationName>GBIF Download Service</organizationName></creator>\n"
        "  <metadataProvider><organizationName>GBIF Download Service</organizationName></metadataProvider>\n"
        f"  <pubDate>{CREATED[0]}-{CREATED[1]:02d}-{CREATED[2]:02d}</pubDate>\n"
        "  <language>ENGLISH</language>\n"
        f"  <abstract>\n    <para>{escape(abstract)}</para>\n  </abstract>\n"
        "  <intellectualRights><para>Data from some individual datasets included in this download may be "
        "licensed under less restrictive terms.</para></intellectualRights>\n"
        "</dataset>\n"
        "<additionalMetadata>\n  <metadata>\n    <gbif>\n"
        f"      <dateStamp>{created}</dateStamp>\n"
        f"      <citation identifier={quoteattr('https://doi.org/' + doi)}>{escape(citation)}</citation>\n"
        "      <physical>\n        <objectName>occurrence.txt</objectName>\n"
        "        <characterEncoding>UTF-8</characterEncoding>\n"
        "        <dataFormat><externallyDefinedFormat><formatName>Darwin Core Archive</formatName>"
        "</externallyDefinedFormat></dataFormat>\n"
        '        <distribution><online><url function="download">'
        f"https://api.gbif.org/v1/occurrence/download/request/{escape(key)}.zip</url></online></distribution>\n"
        "      </physical>\n    </gbif>\n  </metadata>\n</additionalMetadata>\n</eml:eml>\n"
    )


def _entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    # ZipFile.open(ZipInfo, "w") takes the level from the entry (_compresslevel until Python 3.13 named it).
    try:
        info.compress_level = COMPRESS_LEVEL  # type: ignore[attr-defined]
    except AttributeError:
        info._compresslevel = COMPRESS_LEVEL  # type: ignore[attr-defined]
    return info


def _write_member(archive: zipfile.ZipFile, name: str, text: str) -> None:
    with archive.open(_entry(name), "w") as member:
        member.write(text.encode("utf-8"))


def _chunks(u: _Universe, records: int, seed: int) -> Iterator[tuple[bytes, np.ndarray]]:
    header = ("\t".join(COLUMNS) + "\n").encode("utf-8")
    yield header, np.zeros(0, dtype=np.int64)
    for chunk, start in enumerate(range(0, records, CHUNK_ROWS)):
        yield _chunk_text(u, seed, chunk, start, min(CHUNK_ROWS, records - start))


def _write_streamed(write: Callable[[bytes], Any], blocks: Iterator[bytes]) -> None:
    """Write ``blocks`` from a second thread while the next one is built (deflate releases the GIL)."""
    pending: queue.Queue[bytes | None] = queue.Queue(maxsize=2)
    failure: list[BaseException] = []

    def writer() -> None:
        try:
            while (block := pending.get()) is not None:
                write(block)
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(error)
            while pending.get() is not None:
                pass

    thread = threading.Thread(target=writer, name="dwca-writer", daemon=True)
    thread.start()
    try:
        for block in blocks:
            if failure:
                break
            pending.put(block)
    finally:
        pending.put(None)
        thread.join()
    if failure:
        raise failure[0]


def write_gbif_dwca(path: Path, records: int, seed: int) -> GeneratedDownload:
    """Write a GBIF-shaped DwC-A of ``records`` occurrences to ``path`` (replaced atomically)."""
    started = time.perf_counter()
    u = _universe(records, seed)
    key, doi = download_identity(records, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.staging")
    per_species = np.zeros(len(u.registry), dtype=np.int64)
    occurrence_bytes = 0

    def blocks() -> Iterator[bytes]:
        nonlocal occurrence_bytes
        for text, species in _chunks(u, records, seed):
            per_species[:] += np.bincount(species, minlength=len(u.registry))
            occurrence_bytes += len(text)
            yield text

    with zipfile.ZipFile(
        staging, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=COMPRESS_LEVEL
    ) as archive:
        with archive.open(_entry("occurrence.txt"), "w", force_zip64=True) as member:
            _write_streamed(member.write, blocks())
        _write_member(archive, "meta.xml", meta_xml())
        # The constituent datasets' counts follow from the species' draws only in aggregate, as GBIF
        # lists them: by dataset weight, largest last.
        names = u.datasets["datasetName"].tolist()
        shares = np.floor(u.dataset_weights * records).astype(np.int64)
        shares[0] += records - int(shares.sum())
        per_dataset = sorted(zip(names, shares.tolist(), strict=True), key=lambda item: item[1])
        _write_member(archive, "metadata.xml", metadata_xml(key, doi, query_json(u.registry), per_dataset))
        rights = "".join(
            f"Dataset: {name}\nRights as supplied: {license_uri}\n\n"
            for name, license_uri in zip(names, u.datasets["license"].tolist(), strict=True)
        )
        _write_member(archive, "rights.txt", rights)
        citations = "".join(
            f"{name} {dataset_key}\n"
            for name, dataset_key in zip(names, u.datasets["datasetKey"].tolist(), strict=True)
        )
        _write_member(
            archive,
            "citations.txt",
            "When using this dataset please use the following citation and pay attention to the rights "
            f"documented in rights.txt:\nGBIF.org (30 November 2026) GBIF Occurrence Download "
            f"https://doi.org/{doi}\n\nDatasets:\n{citations}",
        )
    staging.replace(path)
    return GeneratedDownload(
        path=path,
        key=key,
        doi=doi,
        records=records,
        seed=seed,
        version=GENERATOR_VERSION,
        zip_bytes=path.stat().st_size,
        occurrence_bytes=occurrence_bytes,
        seconds=time.perf_counter() - started,
        records_per_species={
            species.slug: int(count) for species, count in zip(u.registry, per_species.tolist(), strict=True)
        },
    )


def cached_dwca(cache: Path, records: int, seed: int) -> tuple[GeneratedDownload, bool]:
    """The zip for ``(records, seed)`` under ``cache``, generated only when missing; (download, was_cached).

    Kept as ``cache/r<records>-s<seed>-v<version>/<key>.zip`` (the key must be the file's name: the reader
    takes it from there) with a JSON sidecar of what the generator reported.
    """
    key, _ = download_identity(records, seed)
    folder = cache / f"r{records}-s{seed}-v{GENERATOR_VERSION}"
    path = folder / f"{key}.zip"
    sidecar = folder / "generated.json"
    if path.exists() and sidecar.exists():
        generated = GeneratedDownload.from_dict(json.loads(sidecar.read_text(encoding="utf-8")))
        if generated.zip_bytes == path.stat().st_size:
            return dataclasses.replace(generated, path=path), True
    generated = write_gbif_dwca(path, records, seed)
    sidecar.write_text(json.dumps(generated.as_dict(), indent=1) + "\n", encoding="utf-8")
    return generated, False


def place_download(generated: GeneratedDownload, folder: Path) -> Path:
    """The zip in ``folder`` (a hard link to the cached file where the filesystem allows, else a copy)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / generated.path.name
    try:
        os.link(generated.path, target)
    except OSError:
        shutil.copyfile(generated.path, target)
    return target
