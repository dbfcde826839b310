"""The fault suite: kills, server restarts, overlapping runs and dropped connections (``make faults``)."""
