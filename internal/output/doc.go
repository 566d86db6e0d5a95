// Package output puts a command's result where the user asked: stdout, or a
// file that is replaced whole or not at all, so a reader (or a crash) never
// sees half an output. Renderers live with their data (flame, report, the
// engines); this package only places bytes.
//
// Write: one result, rendered into a temporary next to the file and renamed
// over it once complete. Live (stat -i, red -i): one report per interval,
// rendered whole and written in one write(2) to a temporary that is renamed
// over the file after the first interval, so the file holds the old content
// or whole intervals.
//
// Price: one temporary file and a rename per output (per live run), a copy
// of each interval in memory. Truth it reads: none (it only writes).
// Cannot see: whether the disk keeps what it was given (no fsync); a reader
// that opened the old file before the rename keeps reading the old one.
package output
