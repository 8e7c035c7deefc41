// Live refresh: re-fetch the live part every 5 s and swap it in; a lost session goes back to the login form.
(function () {
  var live = document.getElementById('live');
  function tick() {
    fetch(live.dataset.src, { credentials: 'same-origin' }).then(function (r) {
      if (r.status === 401) { window.location.href = '/ui/login'; return null; }
      return r.ok ? r.text() : null;
    }).then(function (html) {
      if (html !== null) { live.innerHTML = html; }
    }).catch(function () {}).finally(function () { setTimeout(tick, 5000); });
  }
  setTimeout(tick, 5000);
})();
