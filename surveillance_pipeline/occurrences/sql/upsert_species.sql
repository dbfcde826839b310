INSERT INTO species (species_id, slug, scientific_name, vernacular_name, taxon_key)
VALUES (%(species_id)s, %(slug)s, %(scientific_name)s, %(vernacular_name)s, %(taxon_key)s)
ON CONFLICT (species_id) DO UPDATE
SET slug = EXCLUDED.slug,
    scientific_name = EXCLUDED.scientific_name,
    vernacular_name = EXCLUDED.vernacular_name,
    taxon_key = EXCLUDED.taxon_key
WHERE (species.slug, species.scientific_name, species.vernacular_name, species.taxon_key)
      IS DISTINCT FROM (EXCLUDED.slug, EXCLUDED.scientific_name, EXCLUDED.vernacular_name, EXCLUDED.taxon_key)
