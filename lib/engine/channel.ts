/**
 * A one-producer, one-consumer async queue: the scheduler pushes events, a route iterates them.
 * When the consumer stops iterating early (client gone), `onCancel` tells the producer, so the
 * sequence is dropped at the next step instead of decoding for nobody.
 *
 * @example
 * ```ts
 * import { newChannel } from "./channel.ts";
 * const ch = newChannel<number>();
 * ch.push(1); ch.close();
 * for await (const n of ch.iterable) console.log(n);
 * ```
 * @module
 */

export type Channel<T> = {
  push(v: T): void;
  close(): void;
  readonly cancelled: boolean;
  iterable: AsyncIterable<T>;
};

export function newChannel<T>(onCancel?: () => void): Channel<T> {
  const items: T[] = [];
  let closed = false;
  let cancelled = false;
  let wake: (() => void) | undefined;
  const notify = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  const cancel = () => {
    if (cancelled || closed) return;
    cancelled = true;
    notify();
    onCancel?.();
  };
  return {
    push(v) {
      if (closed || cancelled) return;
      items.push(v);
      notify();
    },
    close() {
      closed = true;
      notify();
    },
    get cancelled() {
      return cancelled;
    },
    iterable: {
      [Symbol.asyncIterator]() {
        return {
          async next(): Promise<IteratorResult<T>> {
            while (items.length === 0 && !closed && !cancelled) {
              await new Promise<void>((r) => (wake = r));
            }
            if (items.length) return { value: items.shift()!, done: false };
            return { value: undefined, done: true };
          },
          return(): Promise<IteratorResult<T>> {
            cancel();
            return Promise.resolve({ value: undefined, done: true });
          },
        };
      },
    },
  };
}
