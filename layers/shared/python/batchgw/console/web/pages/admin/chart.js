// The Request volume chart: one bar per interval of GET /admin/request-metrics, the requests
// callers made directly with the batch worker's stacked on top in violet, drawn by uPlot
// (pinned, from the npm registry). A click on a bar, or its row in the table beside the
// chart (the keyboard's way in), picks that bar's stretch; picking it again lets it go.

import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import { count, when } from "../../format.js";
import { html } from "../../ui.js";

const INTERACTIVE = "#2f6fb3";
const BATCH = "#7c3aed"; // violet, as the spec says

export function VolumeChart({ metrics, picked, onPick }) {
  const holder = useRef(null);
  const plot = useRef(null);
  const pickRef = useRef(onPick);
  pickRef.current = onPick;
  const bars = metrics.data;

  useEffect(() => {
    if (!holder.current || bars.length === 0) return undefined;
    const step = bars[0].end_time - bars[0].start_time;
    const xs = bars.map((b) => b.start_time + step / 2);
    const direct = bars.map((b) => b.request_count);
    const stacked = bars.map((b) => b.request_count + b.batch_request_count);
    const builder = uPlot.paths.bars({ size: [0.8, 48] });
    const options = {
      width: Math.max(320, holder.current.clientWidth || 640),
      height: 220,
      legend: { show: false },
      cursor: { drag: { x: false, y: false }, points: { show: false } },
      scales: { x: { time: true, range: () => [bars[0].start_time, bars[bars.length - 1].end_time] }, y: { range: (u, min, max) => [0, Math.max(1, max)] } },
      axes: [{}, { label: "requests" }],
      series: [
        {},
        { label: "Batch requests", fill: BATCH, width: 0, paths: builder, points: { show: false } },
        { label: "Direct requests", fill: INTERACTIVE, width: 0, paths: builder, points: { show: false } },
      ],
      hooks: {
        ready: [(u) => u.over.addEventListener("click", () => {
          const index = u.cursor.idx;
          if (index != null) pickRef.current(bars[index]);
        })],
      },
    };
    // The total first, in violet, then the direct requests over it: the batch part shows on top.
    plot.current = new uPlot(options, [xs, stacked, direct], holder.current);
    return () => {
      plot.current.destroy();
      plot.current = null;
    };
  }, [JSON.stringify(bars)]);

  useEffect(() => {
    const u = plot.current;
    if (!u) return;
    if (!picked) {
      u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
      return;
    }
    const left = u.valToPos(picked.start_time, "x");
    const right = u.valToPos(picked.end_time, "x");
    u.setSelect({ left, top: 0, width: right - left, height: u.over.clientHeight }, false);
  }, [picked, plot.current]);

  const total = bars.reduce((n, b) => n + b.request_count, 0);
  const batch = bars.reduce((n, b) => n + b.batch_request_count, 0);
  return html`
    <figure class="chart">
      <div ref=${holder} class="plot" role="img" aria-label=${`${count(total)} direct and ${count(batch)} batch requests over ${bars.length} bars`}></div>
      <figcaption class="legend"><span class="swatch direct"></span> Direct requests <span class="swatch batch"></span> Batch requests (stacked on top). Click a bar to list its requests.</figcaption>
      <details>
        <summary>The bars as a table</summary>
        <div class="table-wrap" tabindex="0" role="region" aria-label="The bars"><table class="bars">
          <thead><tr><th scope="col">From</th><th scope="col">Direct</th><th scope="col">Failed</th><th scope="col">Batch</th><th scope="col">Batch failed</th><th scope="col"><span class="sr-only">Pick</span></th></tr></thead>
          <tbody>${bars.map((b) => html`<tr key=${b.start_time}>
            <td>${when(b.start_time)}</td><td>${count(b.request_count)}</td><td>${count(b.error_count)}</td><td>${count(b.batch_request_count)}</td><td>${count(b.batch_error_count)}</td>
            <td><button type="button" aria-pressed=${picked && picked.start_time === b.start_time ? "true" : "false"} onClick=${() => onPick(b)}>List <span class="sr-only">the requests from ${when(b.start_time)}</span></button></td></tr>`)}</tbody>
        </table></div>
      </details>
    </figure>`;
}
