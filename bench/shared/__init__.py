"""What the bench's sections share: timing, scratch places, the bench species, measured processes, the
import's limit, generated inputs, and the section files. A helper imports no section and not the runner."""
