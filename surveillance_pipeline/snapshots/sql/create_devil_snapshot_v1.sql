-- devil_snapshot, schema version 1.
CREATE TABLE {table} (
    id      bigint  PRIMARY KEY,
    year    integer,
    license text    NOT NULL,
    pick    integer NOT NULL UNIQUE CHECK (pick >= 1)
)
