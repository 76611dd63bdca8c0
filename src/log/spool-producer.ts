// The spool's producer side (FORMAT.md, "Spool files"): pushes made while no process has the
// queue open, appended to a spool file of this producer's own in the store directory.
import { QueueError } from '../errors.js';
import type { ProducerBackend, SpoolOptions } from '../remote/backend.js';

/** Open a spool file of this producer's own in `dir`. */
export async function openSpool(dir: string, options: SpoolOptions): Promise<ProducerBackend> {
  void dir;
  void options;
  throw new QueueError('ERR_UNSUPPORTED', 'The spool is not available in this build');
}
