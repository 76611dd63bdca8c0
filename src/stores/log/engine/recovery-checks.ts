// Implements FORMAT.md §6.2 "File-level checks".
/**
 * The file-level checks of recovery, as one labelled table. Recovery (and `verify`, which runs the
 * same plan without writing) names the row it applies; the table is printed in FORMAT.md §6.2, and
 * a test builds a directory for every row and checks the verdict.
 */
import { OpenError } from '../../../contract/errors.js';

export type FileCheckVerdict =
  /** `ERR_UNSUPPORTED_VERSION`: written by a newer version; nothing on disk changes. */
  | 'unsupported'
  /** `ERR_CORRUPT`: open fails, with the file and offset. */
  | 'corrupt'
  /** `ERR_STORE`: not a store; open fails and changes nothing. */
  | 'refused'
  /** Recovery tidies it (deletes a file, creates one, raises a counter) and opens. */
  | 'tidied';

export interface FileCheck {
  readonly id: number;
  readonly label: string;
  readonly verdict: FileCheckVerdict;
}

function row(id: number, verdict: FileCheckVerdict, label: string): FileCheck {
  return { id, label, verdict };
}

/** FORMAT.md §6.2, in the order recovery applies them. */
export const FILE_CHECKS = {
  foreignFile: row(1, 'refused', 'the directory holds a file that no store writes'),
  newerVersion: row(2, 'unsupported', 'a segment, the cursor or the identity file has magic and a format version above this reader'),
  badSegmentHeader: row(
    3,
    'corrupt',
    'a segment header is damaged: short, bad magic, version 0, bad CRC, bad size, unknown flag, seqs out of range',
  ),
  baseSeqMismatch: row(4, 'corrupt', "a segment header's base seq differs from its file name"),
  interruptedCreation: row(
    5,
    'tidied',
    'the last segment is a prefix of the header its name implies, then zeros, and is the one a roll was creating: deleted',
  ),
  tornHeaderElsewhere: row(6, 'corrupt', 'a segment with an incomplete header that is not the one a roll was creating'),
  badCursor: row(
    7,
    'corrupt',
    'the cursor file is damaged: short, bad magic, version 0, bad CRC, bad ranges, a checkpoint size past the file, malformed or out-of-order marks or dead letters',
  ),
  superseded: row(8, 'tidied', 'a COMPACTED segment replaces the segments whose base lies in its range: those are deleted'),
  cursorMissing: row(9, 'corrupt', 'the cursor file is missing while segments hold data'),
  noSegments: row(10, 'corrupt', 'no segment files, but the cursor describes data'),
  badSeal: row(11, 'corrupt', 'a sealed segment does not end in a valid SEAL frame for its base'),
  chainBroken: row(12, 'corrupt', "a segment's base seq differs from the previous segment's seal end seq"),
  compactedUnsealed: row(13, 'corrupt', 'the last segment is COMPACTED but does not end in a SEAL'),
  missingSegment: row(14, 'corrupt', "the first segment's base seq is above the low-water mark: unacked seqs have no segment"),
  dataBehindCheckpoint: row(15, 'corrupt', "the checkpoint's next seq is above the end of the recovered data"),
  strayTmp: row(16, 'tidied', 'a `*.tmp` file: deleted, never read'),
  sealedActive: row(17, 'tidied', 'the active segment ends in a SEAL: the next segment is created'),
  acksPastData: row(18, 'tidied', 'ACK records reference seqs past the data (lost under `none`): the next seq is raised past them'),
  emptyDirectory: row(19, 'tidied', 'no store files: a new store is created'),
  badIdentity: row(
    20,
    'corrupt',
    'the identity file is damaged: bad magic, version 0, bad size, bad CRC, unknown flags, reserved bytes not zero',
  ),
  noIdentity: row(
    21,
    'tidied',
    'no identity file (a new store, or one written before identities), or a new store beside an old identity file: a new identity is written',
  ),
} as const satisfies Record<string, FileCheck>;

export type FileCheckName = keyof typeof FILE_CHECKS;

export const FILE_CHECK_LIST: readonly FileCheck[] = Object.values(FILE_CHECKS);

/** The error a failed check raises, naming its row. */
export function checkFailed(check: FileCheck, file: string, offset: number, detail: string): OpenError {
  const what = `${detail} (file check ${check.id})`;
  if (check.verdict === 'unsupported') return new OpenError('ERR_UNSUPPORTED_VERSION', what, { file, offset });
  if (check.verdict === 'refused') return new OpenError('ERR_STORE', what, { file });
  return damageAt(file, offset, what);
}

/** `ERR_CORRUPT` for damage found inside a file's frames (a row of the tail table, which names itself). */
export function damageAt(file: string, offset: number, reason: string): OpenError {
  return new OpenError('ERR_CORRUPT', `Store file ${file} is damaged at offset ${offset}: ${reason}`, { file, offset });
}
