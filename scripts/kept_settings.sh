# Settings that shape the data, kept with this clone's warehouse as its URL is (.local/env.sh): given once
# to a command (make run, plan, ui, ...), the later ones use them too, so a command from a fresh shell never
# plans or runs against another data folder, GBIF source, species registry or quality file without saying
# so. Given again with another value, the new one is kept (and said). Sourced by the Makefile after
# .local/env.sh, in the clone's root; reads and writes .local/settings.env (NAME=value lines, read as text,
# never run).

kept_settings_file=.local/settings.env

kept_setting() {
    # The value kept for $1, or nothing.
    [ -f "$kept_settings_file" ] || return 0
    local line
    while IFS= read -r line; do
        [ "${line%%=*}" = "$1" ] && printf '%s' "${line#*=}"
    done < "$kept_settings_file"
    return 0
}

keep_setting() {
    # Record $1=$2 in place of any earlier value.
    mkdir -p "$(dirname "$kept_settings_file")"
    local others=""
    if [ -f "$kept_settings_file" ]; then
        others="$(grep -v "^$1=" "$kept_settings_file" || true)"
    fi
    { [ -n "$others" ] && printf '%s\n' "$others"; printf '%s=%s\n' "$1" "$2"; } > "$kept_settings_file.tmp"
    mv "$kept_settings_file.tmp" "$kept_settings_file"
}

for kept_name in SURVEILLANCE_DATA_DIR GBIF_SOURCE SURVEILLANCE_SPECIES_FILE SURVEILLANCE_QUALITY_FILE; do
    kept_given="${!kept_name:-}"
    kept_value="$(kept_setting "$kept_name")"
    if [ -n "$kept_given" ]; then
        # Paths are kept absolute: the same folder from wherever the next command starts.
        case "$kept_name" in GBIF_SOURCE) ;; *) kept_given="$(realpath -m -- "$kept_given")" ;; esac
        if [ "$kept_given" != "$kept_value" ]; then
            keep_setting "$kept_name" "$kept_given"
            if [ -n "$kept_value" ]; then
                echo "make: $kept_name=$kept_given, in place of $kept_value (kept in $kept_settings_file for the next commands)" >&2
            fi
        fi
        export "$kept_name=$kept_given"
    elif [ -n "$kept_value" ]; then
        echo "make: $kept_name=$kept_value, as an earlier command was given (kept in $kept_settings_file: set it to change, remove that file to forget)" >&2
        export "$kept_name=$kept_value"
    fi
done
unset kept_name kept_given kept_value
