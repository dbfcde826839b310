-- devil_snapshot, schema version 2: the database itself refuses a license we do not publish.
CREATE TABLE {table} (
    id      bigint  PRIMARY KEY,
    year    integer,
    license text    NOT NULL CHECK (license IN ({licenses})),
    pick    integer NOT NULL UNIQUE CHECK (pick >= 1)
)
