"""Pure building blocks shared by every layer: time, conditions, reasons, errors. No I/O here."""
