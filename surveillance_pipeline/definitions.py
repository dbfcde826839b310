"""The code location: merges each domain's definitions and binds resources. Nothing else happens here."""

import os

import dagster as dg

from surveillance_pipeline.occurrences import definitions as occurrences
from surveillance_pipeline.resources import DataPaths, GbifSource, Warehouse
from surveillance_pipeline.settings import DATABASE_URL_VARIABLE, GBIF_SOURCE_VARIABLE, data_dir

resources = {
    # EnvVar is read at run time and shown masked in the UI: the password never sits in the definitions.
    "warehouse": Warehouse(database_url=dg.EnvVar(DATABASE_URL_VARIABLE)),
    "paths": DataPaths(root=str(data_dir())),
    "gbif": GbifSource(source=os.environ.get(GBIF_SOURCE_VARIABLE, "lab")),
}

defs = dg.Definitions.merge(occurrences.defs, dg.Definitions(resources=resources))
