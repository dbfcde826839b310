"""make run writes the lab's inputs the registry in use can have."""

from surveillance_pipeline.commands.run import prepare_lab_inputs


def test_a_registry_without_the_devil_gets_the_lab_batches_but_no_devil_delivery(tmp_path, monkeypatch):
    registry = tmp_path / "species.csv"
    registry.write_text(
        "species_id,slug,scientific_name,vernacular_name,taxon_key,kingdom,country,state_province,"
        "lab_records,habitat\n1,delphinium-fissum,Delphinium fissum,,7276601,Plantae,ES,,0,\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("SURVEILLANCE_SPECIES_FILE", str(registry))
    prepare_lab_inputs(tmp_path / "data")
    assert not (tmp_path / "data" / "deliveries").exists()
    assert sorted((tmp_path / "data" / "batches").glob("*.csv")), "the lab's batches are written all the same"
