/**
 * Writing to stdout and stderr without losing lines or memory. On POSIX, writes to a pipe are
 * asynchronous: a process that writes without waiting holds the unread output in memory, and one
 * that calls `process.exit()` before its writes complete loses their end. So lines are gathered
 * into chunks, a chunk is written once it is large, a writer waits for 'drain' before it writes
 * more, and `flush()` waits until everything written so far was handed to the operating system.
 */
import type { Writable } from 'node:stream';

/** Output is gathered into chunks of about this size before a write. */
const CHUNK_BYTES = 64 * 1024;

/** The reader of the output went away (EPIPE): the command stops, quietly. */
export class OutputClosed extends Error {
  constructor() {
    super('the reader of the output closed it');
    this.name = 'OutputClosed';
  }
}

/** The output could not be written for another reason (ENOSPC on a file, EIO, ...). */
export class OutputFailed extends Error {
  readonly errno: string | undefined;

  constructor(cause: unknown) {
    const errno = (cause as { code?: unknown })?.code;
    super(`cannot write the output: ${(cause as Error)?.message ?? String(cause)}`, { cause });
    this.name = 'OutputFailed';
    this.errno = typeof errno === 'string' ? errno : undefined;
  }
}

function classify(error: unknown): OutputClosed | OutputFailed {
  const code = (error as { code?: unknown })?.code;
  return code === 'EPIPE' || code === 'ECONNRESET' ? new OutputClosed() : new OutputFailed(error);
}

export class Output {
  readonly #stream: Writable;
  #chunk: string[] = [];
  #chunkLength = 0;
  /** The last write was refused by the stream's buffer: wait for 'drain' before writing more. */
  #needDrain = false;
  /** Set by the first failed write; every later write and flush throws it. */
  #failure: OutputClosed | OutputFailed | undefined;

  constructor(stream: Writable) {
    this.#stream = stream;
    // Without a listener a failed write (EPIPE once `head` has exited) is an uncaught exception.
    stream.on('error', (error: unknown) => {
      this.#failure ??= classify(error);
    });
  }

  get isTTY(): boolean {
    return (this.#stream as { isTTY?: boolean }).isTTY === true;
  }

  /** The failure of an earlier write, if any. */
  get failure(): OutputClosed | OutputFailed | undefined {
    return this.#failure;
  }

  /**
   * Add one line (a newline is appended). Returns false, like `Writable.write`, when the caller
   * should `await ready()` before adding more; a full chunk is written at once.
   */
  line(text = ''): boolean {
    if (this.#failure) throw this.#failure;
    this.#chunk.push(text, '\n');
    this.#chunkLength += text.length + 1;
    if (this.#chunkLength >= CHUNK_BYTES && !this.#needDrain) this.#needDrain = !this.#stream.write(this.#take());
    return !this.#needDrain;
  }

  /** Resolves when more may be added: at once, or after 'drain'. */
  async ready(): Promise<void> {
    if (this.#failure) throw this.#failure;
    if (!this.#needDrain) return;
    await this.#drained();
    this.#needDrain = false;
  }

  /** Text without a newline, written at once (a progress line that rewrites itself). */
  async text(text: string): Promise<void> {
    this.#chunk.push(text);
    this.#chunkLength += text.length;
    await this.flush();
  }

  /** Resolves once everything added so far was handed to the operating system. */
  async flush(): Promise<void> {
    if (this.#failure) throw this.#failure;
    const data = this.#take();
    // Writes complete in order, so the callback of this one (even an empty one) comes after
    // every earlier write has completed.
    await new Promise<void>((resolve, reject) => {
      this.#stream.write(data, (error) => {
        if (error) {
          this.#failure ??= classify(error);
          reject(this.#failure);
        } else resolve();
      });
    });
    this.#needDrain = false;
  }

  #take(): string {
    const data = this.#chunk.join('');
    this.#chunk = [];
    this.#chunkLength = 0;
    return data;
  }

  /** Waits for 'drain', or for the failure that makes it never come. */
  #drained(): Promise<void> {
    const stream = this.#stream;
    return new Promise<void>((resolve, reject) => {
      if (stream.destroyed) {
        reject(this.#failure ?? new OutputClosed());
        return;
      }
      const done = (): void => {
        stream.off('drain', onDrain);
        stream.off('error', onEnd);
        stream.off('close', onEnd);
      };
      const onDrain = (): void => {
        done();
        resolve();
      };
      // 'close' carries no error (a socket passes a boolean): the failure recorded by the
      // constructor's listener, or a closed reader, explains it.
      const onEnd = (error?: unknown): void => {
        done();
        reject(this.#failure ?? (error instanceof Error ? classify(error) : new OutputClosed()));
      };
      stream.on('drain', onDrain);
      stream.on('error', onEnd);
      stream.on('close', onEnd);
    });
  }
}

/**
 * A progress line on stderr that rewrites itself, shown only when stderr is a terminal (never in
 * a pipe or a log file). Updates are rate-limited so that showing progress costs nothing measurable.
 */
export class Progress {
  readonly #err: Output;
  readonly #enabled: boolean;
  #lastAt = 0;
  #shown = false;

  constructor(err: Output, enabled: boolean) {
    this.#err = err;
    this.#enabled = enabled && err.isTTY;
  }

  get enabled(): boolean {
    return this.#enabled;
  }

  /** Show `text` unless a line was shown less than 100 ms ago (`force` shows it anyway). */
  update(text: string, force = false): void {
    if (!this.#enabled) return;
    const now = performance.now();
    if (!force && this.#shown && now - this.#lastAt < 100) return;
    this.#lastAt = now;
    this.#shown = true;
    // Progress is best effort: a failed write of it must not fail the command.
    this.#err.text(`\r\x1b[K${text}`).catch(() => undefined);
  }

  /** Remove the line, so what follows starts on a clean line. */
  done(): void {
    if (!this.#shown) return;
    this.#shown = false;
    this.#err.text('\r\x1b[K').catch(() => undefined);
  }
}
