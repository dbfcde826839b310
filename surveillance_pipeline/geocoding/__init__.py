"""The geocoding service geocoded_localities asks (Nominatim-style over HTTP), as gbif is GBIF's client."""
