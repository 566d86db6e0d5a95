// pyobs flame graph: hover, click-to-zoom, search, icicle toggle.
// Written for pyobs; works in a standalone SVG and inlined in HTML.
(function () {
  var cs = document.currentScript, svg = cs && cs.closest ? cs.closest('svg') : null;
  if (!svg) { var all = document.querySelectorAll('svg.pyobs-flame'); svg = all[all.length - 1]; }
  function A(e, n) { return e.getAttribute(n); }
  function N(e, n) { return +e.getAttribute(n); }
  function q(c) { return svg.querySelector('.' + c); }
  var W = N(svg, 'data-fw'), X0 = N(svg, 'data-fx'), T = N(svg, 'data-total'), U = A(svg, 'data-unit'),
    TOP = N(svg, 'data-top'), FH = N(svg, 'data-fh'), MD = N(svg, 'data-maxdepth'), CW = N(svg, 'data-cw'),
    ic = A(svg, 'data-icicle') == '1', st = q('status'), mt = q('matched'), rs = q('reset'),
    tg = q('toggle'), inp = q('search'), hint = st.textContent;
  // One record per drawn frame; depth comes from the enclosing g.level.
  var F = [].map.call(svg.querySelectorAll('g.frame'), function (g) {
    var f = { g: g, o: N(g, 'data-off'), w: N(g, 'data-weight'), d: N(g.parentNode, 'data-depth'), l: A(g, 'data-label') };
    g._f = f;
    return f;
  });
  function cw(c) { var k = c.codePointAt(0); return k >= 0x2e80 && k <= 0xffdc ? 2 : 1; }
  // Same rule as svgFit in svg.go: as many characters as fit, ".." if cut.
  function fit(l, px) {
    var m = Math.floor((px - 6) / CW), n = 0, o = '', c;
    if (m < 3) return '';
    for (c of l) n += cw(c);
    if (n <= m) return l;
    n = 0;
    for (c of l) { if (n + cw(c) > m - 2) break; n += cw(c); o += c; }
    return o + '..';
  }
  function pct(w) { return (T ? 100 * w / T : 0).toFixed(2) + '%'; }
  function place(f, x, w) {
    var r = f.g.firstChild, t = f.g.lastChild;
    r.setAttribute('x', (X0 + x).toFixed(2));
    r.setAttribute('width', w.toFixed(2));
    t.setAttribute('x', (X0 + x + 3).toFixed(2));
    t.textContent = fit(f.l, w);
  }
  // Zoom into z (null: everything): its ancestors span the width, its
  // descendants scale with it, everything else hides.
  function zoom(z) {
    var zo = z ? z.o : 0, zw = z ? z.w : T, zd = z ? z.d : 0;
    if (!zw) return;
    var s = W / zw;
    F.forEach(function (f) {
      var out = f.o + f.w <= zo || f.o >= zo + zw;
      f.g.classList.toggle('hide', out);
      if (!out) { if (f.d < zd) place(f, 0, W); else place(f, (f.o - zo) * s, f.w * s); }
    });
    rs.classList.toggle('hide', zw >= T);
  }
  // Highlight frames whose label matches t (a regex, or a substring when t
  // is not a valid regex); matched % is the union of their extents, so a
  // sample under several matching frames (recursion) counts once.
  function search(t) {
    var re = null, iv = [], sum = 0, end = 0;
    if (t) { try { re = new RegExp(t); } catch (e) { } }
    F.forEach(function (f) {
      var m = !!t && f.d > 0 && (re ? re.test(f.l) : f.l.indexOf(t) >= 0);
      f.g.classList.toggle('match', m);
      if (m) iv.push(f);
    });
    iv.sort(function (a, b) { return a.o - b.o; });
    iv.forEach(function (f) { var e = f.o + f.w, s = Math.max(f.o, end); if (e > s) sum += e - s; if (e > end) end = e; });
    mt.textContent = t ? 'matched: ' + pct(sum) : '';
  }
  function orient(v) {
    ic = v;
    [].forEach.call(svg.querySelectorAll('g.level'), function (l) {
      var d = N(l, 'data-depth');
      l.setAttribute('transform', 'translate(0,' + (TOP + (ic ? d : MD - d) * FH) + ')');
    });
    tg.textContent = ic ? 'Flame' : 'Icicle';
  }
  svg.addEventListener('click', function (e) {
    var t = e.target, g;
    if (t == rs) return zoom(null);
    if (t == tg) return orient(!ic);
    g = t.closest && t.closest('g.frame');
    if (g) zoom(g._f);
  });
  svg.addEventListener('mouseover', function (e) {
    var g = e.target.closest && e.target.closest('g.frame'), f;
    if (!g) return;
    f = g._f;
    st.textContent = f.l + ' \u2014 ' + f.w.toLocaleString('en-US') + ' ' + U + ' (' + pct(f.w) + ')';
  });
  svg.addEventListener('mouseout', function () { st.textContent = hint; });
  inp.addEventListener('input', function () { search(inp.value); });
  document.addEventListener('keydown', function (e) {
    if (e.key == 'Escape') { inp.value = ''; search(''); zoom(null); }
    else if ((e.ctrlKey || e.metaKey) && e.key == 'f') { e.preventDefault(); inp.focus(); }
  });
})();
