/**
 * A watch response is one JSON object per line, in chunks cut anywhere (in
 * the middle of a line, or of a UTF-8 character). This turns chunks into
 * whole lines in time linear in what was received: each new chunk is searched
 * once for line ends, a line's earlier pieces are joined only when its end
 * arrives, and a line longer than the cap is refused as soon as it is.
 */
import { StringDecoder } from 'node:string_decoder';

export class WatchLines {
  readonly #decoder = new StringDecoder('utf8');
  #pieces: string[] = [];
  #piecesLength = 0;
  #examined = 0;
  readonly #maxLine: number;
  readonly #tooLong: () => Error;

  /** `tooLong` makes the error thrown for a line longer than `maxLine` characters. */
  constructor(maxLine: number, tooLong: () => Error) {
    this.#maxLine = maxLine;
    this.#tooLong = tooLong;
  }

  /** Characters searched for a line end so far; never more than were received (the linear-time guarantee the tests hold it to). */
  get examined(): number {
    return this.#examined;
  }

  /** The lines this chunk completes, trimmed, empty ones left out. */
  push(chunk: Buffer): string[] {
    const text = this.#decoder.write(chunk);
    const lines: string[] = [];
    let start = 0;
    for (;;) {
      const end = text.indexOf('\n', start);
      this.#examined += (end < 0 ? text.length : end + 1) - start;
      if (end < 0) break;
      if (this.#piecesLength + end - start > this.#maxLine) throw this.#tooLong();
      const piece = text.slice(start, end);
      const line = (this.#pieces.length === 0 ? piece : this.#pieces.join('') + piece).trim();
      this.#pieces = [];
      this.#piecesLength = 0;
      if (line !== '') lines.push(line);
      start = end + 1;
    }
    if (start < text.length) {
      if (this.#piecesLength + text.length - start > this.#maxLine) throw this.#tooLong();
      this.#pieces.push(text.slice(start));
      this.#piecesLength += text.length - start;
    }
    return lines;
  }
}
