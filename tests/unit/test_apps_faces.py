"""Face stages: NCC against scipy.signal / numpy.corrcoef, NMS against its defining property,
landmark crops and alignment against scipy.ndimage, the encoder against a scipy forward pass,
distances against scipy.spatial.distance.cdist."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch
from scipy.signal import correlate
from scipy.spatial.distance import cdist

from workload.apps import run_task
from workload.apps.faces import (CHIP_SIZE, LANDMARK_REGIONS, FaceDetections, FaceDistances,
                                 box_iou, canonical_landmarks, default_gallery, encode_chips,
                                 encoder_weights, face_compare, face_detection, face_distance,
                                 face_encoding, face_landmarks, nms,
                                 normalized_cross_correlation)
from workload.apps.frames import IDENTITIES, face_template, make_scene

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def face_scene():
    return make_scene(36_864, seed=1, scene="faces", dtype=torch.float64)


@pytest.fixture(scope="module")
def face_run(face_scene):
    return run_task("face_recognition", 36_864, seed=1, frames=face_scene.frames)


def _ncc_reference(img: np.ndarray, tpl: np.ndarray) -> np.ndarray:
    th, tw = tpl.shape
    n = th * tw
    tz = tpl - tpl.mean()
    num = correlate(img, tz, mode="valid", method="direct")
    ones = np.ones_like(tpl)
    s1 = correlate(img, ones, mode="valid", method="direct")
    s2 = correlate(img * img, ones, mode="valid", method="direct")
    return num / np.sqrt(np.maximum(s2 - s1 * s1 / n, 0) * (tz * tz).sum())


def test_ncc_matches_scipy_and_corrcoef(face_scene):
    img = face_scene.frames[:2].numpy()
    tpl = face_template(torch.float64).numpy()
    ours = normalized_cross_correlation(torch.from_numpy(img), torch.from_numpy(tpl)).numpy()
    for k in range(2):
        np.testing.assert_allclose(ours[k], _ncc_reference(img[k], tpl), rtol=0, atol=1e-9)
    th, tw = tpl.shape
    for y, x in [(0, 0), (3, 17), (20, 40)]:  # spot checks with a textbook formula
        window = img[0, y:y + th, x:x + tw]
        assert ours[0, y, x] == pytest.approx(np.corrcoef(window.ravel(), tpl.ravel())[0, 1],
                                              abs=1e-9)
    ours32 = normalized_cross_correlation(torch.from_numpy(img).float(),
                                          torch.from_numpy(tpl).float()).numpy()
    np.testing.assert_allclose(ours32, ours, rtol=0, atol=5e-5)


def test_ncc_is_zero_on_flat_windows():
    out = normalized_cross_correlation(torch.full((1, 20, 20), 0.5), face_template())
    assert torch.equal(out, torch.zeros_like(out))


def _np_iou(a, b):
    inter = (max(0, min(a[2], b[2]) - max(a[0], b[0]))
             * max(0, min(a[3], b[3]) - max(a[1], b[1])))
    area = lambda r: (r[2] - r[0]) * (r[3] - r[1])
    return inter / (area(a) + area(b) - inter)


def test_box_iou_matches_numpy():
    rng = np.random.default_rng(0)
    y0, x0 = rng.random(6) * 10, rng.random(6) * 10
    a = np.stack([y0, x0, y0 + 1 + rng.random(6) * 5, x0 + 1 + rng.random(6) * 5], axis=1)
    ours = box_iou(torch.from_numpy(a), torch.from_numpy(a)).numpy()
    ref = np.array([[_np_iou(p, q) for q in a] for p in a])
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)


def test_nms_is_greedy_nms():
    """Greedy NMS is fully characterised by: kept boxes never overlap (IoU > thr) a
    higher-scored kept box of their group, and every dropped box does."""
    rng = np.random.default_rng(1)
    n, thr = 60, 0.3
    y, x = rng.random(n) * 20, rng.random(n) * 20
    size = 4 + rng.random(n) * 4
    boxes = np.stack([y, x, y + size, x + size], 1)
    scores, groups = rng.random(n), rng.integers(0, 3, n)
    keep = nms(torch.from_numpy(boxes), torch.from_numpy(scores), torch.from_numpy(groups),
               thr).tolist()
    assert keep == sorted(keep, key=lambda i: -scores[i])
    kept = set(keep)
    for i in range(n):
        blockers = [j for j in kept if scores[j] > scores[i] and groups[j] == groups[i]
                    and _np_iou(boxes[i], boxes[j]) > thr]
        assert (i in kept) == (not blockers)
    assert 5 < len(kept) < n


def test_detection_finds_every_face(face_scene, face_run):
    det = face_run["face_detection"]
    t, n = face_scene.boxes.shape[:2]
    assert det.count == t * n
    assert det.frame.tolist() == sorted(det.frame.tolist())
    for f in range(t):
        found = det.boxes[det.frame == f]
        iou = box_iou(face_scene.boxes[f], found)
        assert (iou.max(dim=1).values > 0.6).all()
    assert float(det.scores.min()) > 0.6


def test_detection_on_a_faceless_clip_is_empty():
    det = face_detection(torch.full((3, 40, 56), 0.3) + 0.01 * torch.rand(3, 40, 56,
                         generator=torch.Generator().manual_seed(0)))
    assert det.count == 0 and det.boxes.shape == (0, 4)
    tiny = face_detection(torch.rand(2, 8, 8))  # smaller than the template
    assert tiny.count == 0 and tiny.boxes.shape == (0, 4)


def test_landmark_crops_and_points_match_scipy(face_scene, face_run):
    det, lm = face_run["face_detection"], face_run["face_landmarks"]
    frames = face_scene.frames.numpy()
    p = lm.crops.shape[1]
    frac = (np.arange(p) + 0.5) / p
    for k in range(0, det.count, 5):
        y0, x0, y1, x1 = det.boxes[k].tolist()
        yy, xx = np.meshgrid(y0 + frac * (y1 - y0), x0 + frac * (x1 - x0), indexing="ij")
        img = frames[int(det.frame[k])]
        crop = ndi.map_coordinates(img, [yy, xx], order=1, mode="nearest")
        np.testing.assert_allclose(lm.crops[k].numpy(), crop, rtol=0, atol=1e-12)
        smooth = ndi.gaussian_filter(crop, 1.0, mode="nearest", truncate=4.0)
        for j, (r0, r1, c0, c1) in enumerate(LANDMARK_REGIONS):
            rs, cs = slice(int(r0 * p), int(r1 * p)), slice(int(c0 * p), int(c1 * p))
            i, jj = np.unravel_index(np.argmin(smooth[rs, cs]), smooth[rs, cs].shape)
            expected = (yy[rs, cs][i, jj], xx[rs, cs][i, jj])
            np.testing.assert_allclose(lm.points[k, j].numpy(), expected, rtol=0, atol=1e-12)


def test_aligned_chips_match_lstsq_similarity_and_map_coordinates(face_scene, face_run):
    lm = face_run["face_landmarks"]
    frames = face_scene.frames.numpy()
    canon = canonical_landmarks(CHIP_SIZE, torch.float64).numpy()
    cy, cx = np.meshgrid(np.arange(CHIP_SIZE), np.arange(CHIP_SIZE), indexing="ij")
    for k in range(0, lm.points.shape[0], 7):
        dst = lm.points[k].numpy()
        # dst = [[a, b], [-b, a]] @ (y, x) + t, solved with numpy's least squares.
        rows, rhs = [], []
        for (sy, sx), (dy, dx) in zip(canon, dst):
            rows += [[sy, sx, 1, 0], [sx, -sy, 0, 1]]
            rhs += [dy, dx]
        a, b, ty, tx = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)[0]
        ys, xs = a * cy + b * cx + ty, -b * cy + a * cx + tx
        chip = ndi.map_coordinates(frames[int(lm.frame[k])], [ys, xs], order=1, mode="nearest")
        np.testing.assert_allclose(lm.chips[k].numpy(), chip, rtol=0, atol=1e-9)


def test_landmarks_land_on_the_eyes_and_mouth(face_scene, face_run):
    det, lm = face_run["face_detection"], face_run["face_landmarks"]
    errs = []
    for k in range(det.count):
        gt = face_scene.boxes[int(det.frame[k])]
        g = gt[int(box_iou(det.boxes[k:k + 1], gt).argmax())]
        cy, cx = float(g[0] + g[2]) / 2, float(g[1] + g[3]) / 2
        ry, rx = float(g[2] - g[0]) / 2, float(g[3] - g[1]) / 2
        ident = face_scene.identities[int(box_iou(det.boxes[k:k + 1], gt).argmax())]
        dx = IDENTITIES[ident].eye_dx
        truth = np.array([[cy - 0.25 * ry, cx - dx * rx], [cy - 0.25 * ry, cx + dx * rx],
                          [cy + 0.45 * ry, cx]])
        errs.append(np.hypot(*(lm.points[k].numpy() - truth).T))
    errs = np.array(errs)
    assert np.median(errs) < 1.0 and np.percentile(errs, 95) < 2.0, errs.max()


def _np_encoder(chips: np.ndarray) -> np.ndarray:
    """The encoder's forward pass written with scipy.signal.correlate and numpy."""
    w = {k: v.double().numpy() for k, v in encoder_weights(torch.float64).items()}

    def conv(x, kernel, bias):  # x (C_in, H, W), 'same' with zero padding
        xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
        return np.stack([correlate(xp, kernel[o], mode="valid", method="direct")[0] + bias[o]
                         for o in range(kernel.shape[0])])

    def pool(x):
        c, h, ww = x.shape
        return x.reshape(c, h // 2, 2, ww // 2, 2).max(axis=(2, 4))

    out = []
    for chip in chips:
        x = (chip - chip.mean()) / (chip.std() + 1e-6)
        x = pool(np.maximum(conv(x[None], w["conv1"], w["b1"]), 0))
        x = pool(np.maximum(conv(x, w["conv2"], w["b2"]), 0))
        x = pool(np.maximum(conv(x, w["conv3"], w["b3"]), 0)).ravel()
        e = w["fc"] @ x + w["fc_bias"]
        out.append(e / np.linalg.norm(e))
    return np.array(out)


def test_encoder_matches_a_scipy_forward_pass(face_run):
    chips = face_run["face_landmarks"].chips[:4]
    ref = _np_encoder(chips.numpy())
    ours = face_run["face_encoding"].encodings[:4].numpy()
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-10)
    ours32 = encode_chips(chips.float()).numpy()
    np.testing.assert_allclose(ours32, ref, rtol=0, atol=2e-5)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0)


def test_encoder_is_fixed_and_rejects_wrong_chips():
    a = encoder_weights(torch.float64)["fc"]
    # Rebuilt from the seed (bypassing the cache): identical weights.
    from workload.apps import faces
    faces._weight_cache.clear()
    assert torch.equal(a, encoder_weights(torch.float64)["fc"])
    with pytest.raises(ValueError):
        encode_chips(torch.rand(2, 24, 24))


def test_distances_match_cdist(face_run):
    enc = face_run["face_encoding"].encodings.numpy()
    fd = face_run["face_distance"]
    ref = cdist(enc, default_gallery(torch.float64).numpy())
    np.testing.assert_allclose(fd.distances.numpy(), ref, rtol=0, atol=1e-12)
    custom = face_distance(None, {"face_encoding": face_run["face_encoding"]},
                           gallery=torch.from_numpy(enc[:3]))
    np.testing.assert_allclose(custom.distances.numpy(), cdist(enc, enc[:3]), rtol=0, atol=1e-12)
    assert custom.gallery_ids == (0, 1, 2)


@pytest.mark.parametrize("tolerance", [0.25, 0.32, 0.5])
def test_compare_thresholds_distances(face_run, tolerance):
    fd = face_run["face_distance"]
    m = face_compare(None, {"face_distance": fd}, tolerance=tolerance)
    d = fd.distances.numpy()
    np.testing.assert_array_equal(m.matches.numpy(), d <= tolerance)
    best = np.where(d.min(1) <= tolerance, d.argmin(1), -1)
    np.testing.assert_array_equal(m.best.numpy(), best)
    ids = np.array(fd.gallery_ids)
    np.testing.assert_array_equal(m.identity.numpy(), np.where(best >= 0, ids[best], -1))
    np.testing.assert_allclose(m.best_distance.numpy(), d.min(1))


def test_recognition_beats_chance(face_run, face_scene):
    """The encoder is an untrained stand-in, but aligned chips of one person still resemble
    that person's gallery chip more than the others' (nearest-neighbour accuracy well above
    the 25% of a random guess among 4)."""
    det, fd = face_run["face_detection"], face_run["face_distance"]
    correct = total = 0
    for k in range(det.count):
        gt = face_scene.boxes[int(det.frame[k])]
        ident = face_scene.identities[int(box_iou(det.boxes[k:k + 1], gt).argmax())]
        if ident in fd.gallery_ids:
            total += 1
            correct += fd.gallery_ids[int(fd.distances[k].argmin())] == ident
    assert total > 0 and correct / total > 0.6


def test_empty_detections_flow_through_every_stage():
    frames = torch.rand(2, 40, 56)
    det = FaceDetections(frame=torch.zeros(0, dtype=torch.int64), boxes=torch.zeros(0, 4),
                         scores=torch.zeros(0))
    lm = face_landmarks(frames, {"face_detection": det})
    enc = face_encoding(frames, {"face_landmarks": lm})
    fd = face_distance(frames, {"face_encoding": enc})
    m = face_compare(frames, {"face_distance": fd})
    assert lm.points.shape == (0, 3, 2) and enc.encodings.shape == (0, 128)
    assert fd.distances.shape == (0, 4) and m.best.shape == (0,)
    empty_gallery = FaceDistances(frame=torch.zeros(1, dtype=torch.int64),
                                  distances=torch.zeros(1, 0), gallery_ids=())
    assert face_compare(None, {"face_distance": empty_gallery}).best.tolist() == [-1]
